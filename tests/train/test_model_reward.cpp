// The reward model in a PPO step (train/model_reward.h): its scores on the responses rendered again with its own
// tokenizer, or on the policy's ids where they are the same; the weighted sum with the rule; TRL's running
// normalisation and clipping; the runs of the real command (N ranks == 1 rank, rollout ranks, ZeRO-3, an exact
// resume) and the settings that are refused.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/running_moments.h"
#include "parallel/context.h"
#include "rl/metrics.h"
#include "rollout/rollout.h"
#include "tasks/datasets.h"
#include "tasks/reward.h"
#include "tasks/task.h"
#include "tests/app/run_ppo.h"
#include "tests/model/hf_folder.h"
#include "tests/paths.h"
#include "tests/same_runs.h"
#include "tests/temp_dir.h"
#include "text/tokenizers.h"
#include "train/config_check.h"
#include "train/experience.h"
#include "train/model_reward.h"
#include "train/prompts.h"
#include "workers/actor.h"
#include "workers/reward_worker.h"

namespace {

ppo::Config rm_config(const std::string& rm_dir, const std::vector<std::string>& extra) {
  std::vector<std::string> overrides = {"reward_model.enable=true", "reward_model.model.path=" + rm_dir,
                                        "reward_model.micro_batch_size_per_gpu=3", "trainer.num_threads=1"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  ppo::Config c = ppo::load_config({ppo_test::paths().source_dir + "/configs/regression_tiny.yaml"}, overrides);
  ppo::check_config(c, 1);
  return c;
}

// A batch of the tiny task from a seeded policy: 3 prompts (the last a padding copy) x 2 responses, scored by the
// rule. `seed_index` varies the responses.
struct RuleScored {
  ppo::RankPrompts prompts;
  ppo::Batch batch;
};
RuleScored rule_scored(const ppo::Config& c, const ppo::Tokenizer& tokenizer, int64_t seed_index) {
  auto task = ppo::make_task(c.data.task);
  auto actor = ppo::Actor::reference(c, tokenizer.vocab_size());
  RuleScored out;
  out.prompts = ppo::rank_prompts(task->generate(2, 2, 3, 7 + seed_index), tokenizer, c, 2, 1, 0, /*pad=*/false);
  out.prompts.is_pad.push_back(true);  // a padding copy of the first prompt, as the dispatcher makes one
  out.prompts.samples.push_back(out.prompts.samples[0]);
  out.prompts.texts.push_back(out.prompts.texts[0]);
  out.prompts.ids.push_back(out.prompts.ids[0]);
  out.prompts.positions.push_back(0);
  out.batch = ppo::rollout_batch(actor->model(), tokenizer, out.prompts, {2, 1.0, -1, 1.0, seed_index}, c);
  ppo::Rewarder rewarder(c.reward, task->name());
  ppo::compute_rewards(out.batch, out.prompts, 2, rewarder, tokenizer);
  return out;
}

// The reward model's own scores of the batch's rows, each (prompt, response) encoded and scored alone.
std::vector<double> scored_alone(const ppo::Config& c, const RuleScored& r, const ppo::Tokenizer& tokenizer) {
  ppo::RewardWorker worker(c, c.reward_model.model.path, torch::kCPU);
  std::vector<double> out;
  for (int64_t b = 0; b < r.batch.size(); ++b) {
    const nlohmann::json messages = {{{"role", "user"}, {"content", r.prompts.samples[b / 2].prompt}}};
    out.push_back(
        worker.score_rows({worker.folder().encode(messages, ppo::response_text(r.batch, b, tokenizer))}, 1).front());
  }
  return out;
}

}  // namespace

TEST_CASE("the reward model's score, weighted with the rule's, is the step's score on the last response token",
          "[cpu][reward_model]") {
  ppo_test::TempDir tmp("ppo_model_reward");
  ppo_test::write_reward_model(tmp.sub("rm"));
  const ppo::Config c = rm_config(tmp.sub("rm"), {"reward_model.weight=2", "reward_model.rule_weight=0.5"});
  auto tokenizer = ppo::make_tokenizer("char");
  RuleScored r = rule_scored(c, *tokenizer, 0);
  const torch::Tensor rule = r.batch.at(ppo::field::scores).clone();
  const std::vector<double> alone = scored_alone(c, r, *tokenizer);

  ppo::ModelReward model_reward(c, *tokenizer, torch::kCPU, 0);
  CHECK_FALSE(model_reward.reads_policy_ids());  // the char tokenizer: every response is encoded again
  ppo::Metrics m;
  model_reward.apply(r.batch, r.prompts, 2, ppo::Context::get(), m);
  const torch::Tensor& scores = r.batch.at(ppo::field::scores);
  const torch::Tensor& token_scores = r.batch.at(ppo::field::token_scores);
  const torch::Tensor lengths = r.batch.at(ppo::field::response_mask).sum(1).to(torch::kLong);
  double rm_sum = 0, worst = 0;
  for (int64_t b = 0; b < r.batch.size(); ++b) {
    INFO("row " << b);
    const bool real = b < 4;
    const double expected = real ? 2 * alone[b] + 0.5 * rule[b].item<double>() : 0.0;
    worst = std::max(worst, std::abs(scores[b].item<double>() - expected));
    CHECK(std::abs(scores[b].item<double>() - expected) <= 1e-5 * std::max(1.0, std::abs(expected)));
    CHECK(token_scores[b].sum().item<double>() == Approx(scores[b].item<double>()).margin(1e-6));
    CHECK(token_scores[b][lengths[b].item<int64_t>() - 1].item<double>() == scores[b].item<double>());
    if (real) rm_sum += alone[b];
  }
  std::printf("reward model in the step: max |score - (2 rm + 0.5 rule)| %.3g over 6 rows\n", worst);
  const auto metrics = m.reduce(ppo::Context::get());
  CHECK(metrics.at("reward/rm/mean") == Approx(rm_sum / 4).epsilon(1e-5));
  CHECK(metrics.at("reward/rule/mean") == Approx((rule.narrow(0, 0, 4).sum() / 4).item<double>()).epsilon(1e-6));
  CHECK(metrics.count("reward/rm_scaled/mean") == 0);
}

TEST_CASE("reward_model.normalize and clip: TRL's running moments over every batch, then the clip",
          "[cpu][reward_model]") {
  // The moments merged a batch at a time equal those of all the values at once.
  ppo::RunningMoments moments;
  const std::vector<std::vector<double>> parts = {{1.0, 4.0, -2.0}, {0.5}, {7.0, 3.0, 3.0, -1.5}};
  std::vector<double> all;
  for (const auto& part : parts) {
    double mean = 0, var = 0;
    for (double v : part) mean += v / static_cast<double>(part.size());
    for (double v : part) var += (v - mean) * (v - mean) / static_cast<double>(part.size());
    moments.update(static_cast<int64_t>(part.size()), mean, var);
    all.insert(all.end(), part.begin(), part.end());
  }
  double mean = 0, squares = 0;
  for (double v : all) mean += v / static_cast<double>(all.size());
  for (double v : all) squares += (v - mean) * (v - mean);
  CHECK(moments.count == 8);
  CHECK(moments.mean == Approx(mean).epsilon(1e-12));
  CHECK(moments.std() == Approx(std::sqrt(squares / 7)).epsilon(1e-12));  // Bessel's correction, as TRL's

  // Two batches through the step: each normalised by the moments of the real rows so far, then clipped.
  ppo_test::TempDir tmp("ppo_model_reward_norm");
  ppo_test::write_reward_model(tmp.sub("rm"), /*seed=*/3);
  const ppo::Config c = rm_config(tmp.sub("rm"), {"reward_model.normalize=true", "reward_model.clip=0.5"});
  auto tokenizer = ppo::make_tokenizer("char");
  ppo::ModelReward model_reward(c, *tokenizer, torch::kCPU, 0);
  std::vector<double> seen;
  bool clipped = false;
  for (int64_t index : {0, 1}) {
    RuleScored r = rule_scored(c, *tokenizer, index);
    const std::vector<double> alone = scored_alone(c, r, *tokenizer);
    ppo::Metrics m;
    model_reward.apply(r.batch, r.prompts, 2, ppo::Context::get(), m);
    seen.insert(seen.end(), alone.begin(), alone.begin() + 4);  // the real rows only
    double seen_mean = 0, seen_squares = 0;
    for (double v : seen) seen_mean += v / static_cast<double>(seen.size());
    for (double v : seen) seen_squares += (v - seen_mean) * (v - seen_mean);
    const double std = std::sqrt(seen_squares / static_cast<double>(seen.size() - 1));
    for (int64_t b = 0; b < 4; ++b) {
      const double normalised = (alone[b] - seen_mean) / (std + 1.1920929e-7);
      clipped = clipped || std::abs(normalised) > 0.5;
      CHECK(r.batch.at(ppo::field::scores)[b].item<double>() ==
            Approx(std::max(-0.5, std::min(0.5, normalised))).epsilon(1e-5).margin(1e-6));
    }
    CHECK(model_reward.moments().count == static_cast<int64_t>(seen.size()));
    CHECK(m.reduce(ppo::Context::get()).count("reward/rm_scaled/mean") == 1);
  }
  CHECK(clipped);  // the clip was exercised
}

TEST_CASE("a reward model with the policy's tokenizer and chat template scores the policy's ids as they are",
          "[cpu][reward_model]") {
  ppo_test::TempDir tmp("ppo_model_reward_ids");
  const std::string chatml =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
      "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  ppo_test::write_reward_model(tmp.sub("rm"), /*seed=*/5, chatml);
  // The policy reads the reward model's own tokenizer folder; its prompts are rendered with the same template.
  const ppo::Config same =
      rm_config(tmp.sub("rm"), {"model.tokenizer=" + tmp.sub("rm"), "data.apply_chat_template=true",
                                "model.max_position_embeddings=64", "data.max_prompt_length=40"});
  auto tokenizer = ppo::make_tokenizer(tmp.sub("rm"));
  ppo::ModelReward reuse(same, *tokenizer, torch::kCPU, 0);
  REQUIRE(reuse.reads_policy_ids());
  RuleScored r = rule_scored(same, *tokenizer, 0);
  ppo::Metrics m;
  reuse.apply(r.batch, r.prompts, 2, ppo::Context::get(), m);
  // Each row's real tokens, scored alone.
  ppo::RewardWorker worker(same, tmp.sub("rm"), torch::kCPU);
  const torch::Tensor& ids = r.batch.at(ppo::field::input_ids);
  const torch::Tensor mask = r.batch.at(ppo::field::attention_mask).to(torch::kBool);
  for (int64_t b = 0; b < 4; ++b) {
    const torch::Tensor real = ids[b].masked_select(mask[b]);
    const std::vector<int64_t> row(real.data_ptr<int64_t>(), real.data_ptr<int64_t>() + real.numel());
    CHECK(r.batch.at(ppo::field::scores)[b].item<double>() ==
          Approx(worker.score_rows({row}, 1).front()).epsilon(1e-5).margin(1e-6));
  }
  // Prompts rendered plain with the same tokenizer: the ids as they are too (what ppo rm trains on).
  CHECK(ppo::ModelReward(
            rm_config(tmp.sub("rm"), {"model.tokenizer=" + tmp.sub("rm"), "model.max_position_embeddings=64"}),
            *tokenizer, torch::kCPU, 0)
            .reads_policy_ids());
  // Thinking off, or another template given by data.chat_template: the responses are rendered again.
  for (const std::string other : {"data.enable_thinking=false", "data.chat_template=chatml"}) {
    INFO(other);
    ppo::Config c = same;
    if (other == "data.enable_thinking=false") c.data.enable_thinking = false;
    if (other == "data.chat_template=chatml") c.data.chat_template = "chatml";
    CHECK_FALSE(ppo::ModelReward(c, *tokenizer, torch::kCPU, 0).reads_policy_ids());
  }
}

TEST_CASE("reward_model settings that cannot run, or change nothing, exit 2 with one error line",
          "[cpu][cli][reward_model]") {
  ppo_test::TempDir tmp("ppo_model_reward_bad");
  ppo_test::write_hf_model(tmp.sub("lm"));
  const std::string train =
      "train --config " + ppo_test::paths().source_dir +
      "/configs/regression_tiny.yaml trainer.total_training_steps=1 trainer.output_dir=" + tmp.sub("run") + " ";
  ppo_test::check_one_error(ppo_test::run_ppo(train + "reward_model.enable=true"),
                            "reward_model.enable=true needs reward_model.model.path");
  ppo_test::check_one_error(ppo_test::run_ppo(train + "reward_model.rule_weight=1"),
                            "reward_model.weight, rule_weight, normalize and clip apply with reward_model.enable=true");
  ppo_test::check_one_error(
      ppo_test::run_ppo(train + "reward_model.enable=true reward_model.weight=0 reward_model.model.path=x"),
      "reward_model.weight=0 with reward_model.enable=true");
  ppo_test::check_one_error(
      ppo_test::run_ppo(train + "reward_model.enable=true reward_model.model.path=" + tmp.sub("lm")),
      "names LlamaForCausalLM; a reward model is a *ForSequenceClassification folder");
  ppo_test::check_one_error(ppo_test::run_ppo("sft --config " + ppo_test::paths().source_dir +
                                              "/configs/regression_tiny.yaml reward_model.enable=true "
                                              "reward_model.model.path=x trainer.output_dir=" +
                                              tmp.sub("sft")),
                            "ppo sft has no reward");
  CHECK_FALSE(std::filesystem::exists(tmp.sub("run") + "/metrics.jsonl"));
}

TEST_CASE("a run with a reward model: N ranks, rollout ranks and ZeRO-3 equal 1 rank", "[mpi][reward_model]") {
  ppo_test::TempDir tmp("ppo_model_reward_mpi");
  ppo_test::write_reward_model(tmp.sub("rm"));
  const std::string cfg =
      "reward_model.enable=true reward_model.model.path=" + tmp.sub("rm") +
      " reward_model.rule_weight=1 reward_model.normalize=true reward_model.micro_batch_size_per_gpu=5"
      " actor.ppo_micro_batch_size_per_gpu=4 critic.ppo_micro_batch_size_per_gpu=4"
      " trainer.test_freq=3 ";
  // 2 colocated ranks, 1 rollout rank + 2 trainers.
  ppo_test::check_roles_equal(tmp.sub("run"), cfg, {{2, 0}, {3, 1}});
  ppo_test::check_roles_equal(tmp.sub("zero3"), cfg + "parallel.zero_stage=3", {{2, 0}});
  // Step 1's responses come from the same initial policy: the reward model sharded at stage 3 (its score head read
  // from score.weight a slice at a time) scores them as the whole one does.
  CHECK(ppo_test::metrics(tmp.sub("zero3_1"))[0]["reward/rm/mean"].get<double>() ==
        Approx(ppo_test::metrics(tmp.sub("run_1"))[0]["reward/rm/mean"].get<double>()).epsilon(1e-5));
  for (const auto& line : ppo_test::metrics(tmp.sub("run_1"))) {
    CHECK(line.contains("reward/rm/mean"));
    CHECK(line.contains("reward/rm_scaled/mean"));
    CHECK(line.contains("timing_s/reward_model"));
  }
}

TEST_CASE("rollout ranks one step off-policy with a normalising reward model resume to the same numbers",
          "[mpi][reward_model][roles]") {
  // The moments travel with each batch the rollout rank sends, with the batch in flight into step 2's checkpoint, and
  // back to the rollout rank at the resume.
  ppo_test::TempDir tmp("ppo_model_reward_resume");
  ppo_test::write_reward_model(tmp.sub("rm"));
  const std::string cfg =
      "parallel.rollout_ranks=1 async.max_staleness=1 trainer.total_training_steps=4 "
      "reward_model.enable=true reward_model.normalize=true reward_model.model.path=" +
      tmp.sub("rm");
  REQUIRE(ppo_test::train(3, tmp.sub("full"), cfg).status == 0);
  ppo_test::check_resume_equal(3, tmp.sub("full"), tmp.sub("split"), cfg);
  std::ifstream state_file(tmp.sub("split") + "/checkpoints/global_step_2/trainer_state.json");
  // Step 2's checkpoint holds batch 3 in flight: the moments of three batches of 64 responses.
  CHECK(nlohmann::json::parse(state_file)["reward_moments"]["count"] == 3 * 64);
}
