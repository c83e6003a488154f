// The single-rank trainer: PPO properties, gradient accumulation, non-finite skip, learning, exact resume.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "common/config.h"
#include "common/error.h"
#include "common/files.h"
#include "common/jsonl.h"
#include "rl/algorithms.h"
#include "rollout/rollout.h"
#include "tasks/datasets.h"
#include "tests/model/hf_folder.h"
#include "tests/paths.h"
#include "tests/scalar_reads.h"
#include "tests/temp_dir.h"
#include "text/tokenizers.h"
#include "train/config_check.h"
#include "train/experience.h"
#include "train/prompts.h"
#include "train/trainer.h"
#include "workers/actor.h"
#include "workers/optimizer.h"

namespace fs = std::filesystem;

namespace {

// `ppo train`'s run of `c` in this process.
void train(ppo::Config& c) {
  ppo::fit_run<ppo::PpoSteps>(c, ppo::RunMode::train);
}

ppo::Config tiny_config(const std::string& output_dir, std::vector<std::string> overrides = {}) {
  overrides.push_back("trainer.output_dir=" + output_dir);
  overrides.push_back("trainer.num_threads=1");
  ppo::Config c = ppo::load_config({ppo_test::paths().source_dir + "/configs/regression_tiny.yaml"}, overrides);
  ppo::check_config(c, 1);
  return c;
}

// A rollout batch of the tiny task with old log-probs and some advantages.
ppo::Batch sample_batch(ppo::Config& c, ppo::Actor& actor) {
  auto task = ppo::make_task(c.data.task);
  auto tokenizer = ppo::make_tokenizer("char");
  auto samples = task->generate(4, 2, 3, 7);
  ppo::RankPrompts prompts = ppo::rank_prompts(samples, *tokenizer, c, 4, 1, 0, false);
  ppo::Batch batch = ppo::rollout_batch(actor.model(), *tokenizer, prompts, {2, 1.0, -1, 1.0, 0}, c);
  batch.set("old_log_probs", actor.compute_log_probs(batch, ppo::MicroBatchSpec{3}));
  torch::manual_seed(3);
  batch.set("advantages", torch::randn(batch.at("response_mask").sizes()) * batch.at("response_mask"));
  return batch;
}

std::vector<nlohmann::json> read_metrics(const std::string& dir) {
  return ppo::read_jsonl(dir + "/metrics.jsonl");
}

// Two GRPO runs of `steps` steps of the tiny config from the same seed, into `off` and into `on` with `extra`
// overrides (no validation, no checkpoints); returns their metrics.jsonl lines.
std::pair<std::vector<nlohmann::json>, std::vector<nlohmann::json>> train_off_on(
    const std::string& off, const std::string& on, int steps, const std::vector<std::string>& extra) {
  for (const std::string& dir : {off, on}) {
    ppo::remove_tree(dir);
    std::vector<std::string> overrides = {
        "algorithm.adv_estimator=grpo", "trainer.test_freq=0", "trainer.val_before_train=false",
        "trainer.total_training_steps=" + std::to_string(steps), "trainer.write_checkpoints=false"};
    if (dir == on) overrides.insert(overrides.end(), extra.begin(), extra.end());
    ppo::Config c = tiny_config(dir, overrides);
    train(c);
  }
  return {read_metrics(off), read_metrics(on)};
}

}  // namespace

TEST_CASE("the first micro-batch of the first epoch has ratio 1 and clipfrac 0", "[cpu][trainer]") {
  ppo_test::TempDir tmp;
  ppo::Config c = tiny_config(tmp.sub("ratio"));
  const auto owned = ppo::Actor::policy(c, 99, /*total_optimizer_steps=*/10);
  ppo::Actor& actor = *owned;
  ppo::Batch batch = sample_batch(c, actor);
  actor.model()->train();
  const int64_t R = batch.at("responses").size(1);
  ppo::TokenLogProbs lp = ppo::compute_log_probs(actor.model(), batch.at("input_ids"), batch.at("attention_mask"),
                                                 batch.at("position_ids"), R, c.rollout.temperature);
  const torch::Tensor& mask = batch.at("response_mask");
  double max_diff = ((lp.log_probs - batch.at("old_log_probs")).abs() * mask).max().item<double>();
  INFO("max |log_prob - old_log_prob| = " << max_diff);
  CHECK(max_diff <= 1e-5);
  ppo::PolicyLoss pl = ppo::policy_loss(batch.at("old_log_probs"), lp.log_probs, batch.at("advantages"), mask, {});
  CHECK(pl.clipfrac.item<double>() == 0.0);
  CHECK(std::abs(pl.ppo_kl.item<double>()) <= 1e-6);
}

TEST_CASE("accumulating k micro-batches gives the gradients of one batch", "[cpu][trainer]") {
  ppo_test::TempDir tmp;
  ppo::Config c = tiny_config(tmp.sub("accum"));
  const auto owned = ppo::Actor::policy(c, 99, /*total_optimizer_steps=*/10);
  ppo::Actor& actor = *owned;
  ppo::Batch batch = sample_batch(c, actor);  // 8 responses
  batch.set("sample_mask", torch::ones({batch.size()}));
  auto gradients = [&](int64_t micro, const std::string& mode) {
    actor.optimizer().zero_grad();
    const double tokens = batch.at("response_mask").sum().item<double>(), seqs = static_cast<double>(batch.size());
    const int64_t R = batch.at("responses").size(1);
    for (const ppo::Batch& m : batch.split(micro)) {
      ppo::TokenLogProbs lp = ppo::compute_log_probs(actor.model(), m.at("input_ids"), m.at("attention_mask"),
                                                     m.at("position_ids"), R, 1.0);
      ppo::PolicyLossParams p;
      p.loss_agg_mode = ppo::parse_loss_agg_mode(mode);
      p.denominator = mode == "token-mean" ? tokens : seqs;
      p.norm_length = static_cast<double>(R);
      ppo::policy_loss(m.at("old_log_probs"), lp.log_probs, m.at("advantages"), m.at("response_mask"), p)
          .loss.backward();
    }
    std::vector<torch::Tensor> grads;
    for (auto& param : actor.model()->parameters()) grads.push_back(param.grad().clone().reshape({-1}));
    return torch::cat(grads);
  };
  for (std::string mode : {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"}) {
    torch::Tensor whole = gradients(8, mode), parts = gradients(2, mode);
    double diff = (whole - parts).abs().max().item<double>(), scale = whole.abs().max().item<double>();
    INFO(mode << ": max |grad(1 x 8) - grad(4 x 2)| = " << diff << " (max |grad| " << scale << ")");
    CHECK(scale > 0);
    CHECK(diff <= 1e-6 * std::max(1.0, scale));
  }
}

TEST_CASE("a non-finite gradient skips the step and leaves parameters unchanged", "[cpu][trainer]") {
  ppo_test::TempDir tmp;
  ppo::Config c = tiny_config(tmp.sub("nan"));
  const auto owned = ppo::Actor::policy(c, 99, /*total_optimizer_steps=*/10);
  ppo::Actor& actor = *owned;
  std::vector<torch::Tensor> before;
  for (auto& p : actor.model()->parameters()) {
    before.push_back(p.detach().clone());
    p.mutable_grad() = torch::ones_like(p);
  }
  actor.model()->parameters()[1].mutable_grad()[0] = std::numeric_limits<float>::quiet_NaN();
  ppo::StepResult r = actor.optimizer().step(ppo::Context::get());
  CHECK(r.skipped);
  CHECK(actor.optimizer().steps_taken() == 0);
  auto params = actor.model()->parameters();
  for (size_t i = 0; i < params.size(); ++i) CHECK(torch::equal(params[i], before[i]));
  // A finite gradient does step.
  for (auto& p : params) p.mutable_grad() = torch::ones_like(p);
  r = actor.optimizer().step(ppo::Context::get());
  CHECK_FALSE(r.skipped);
  CHECK_FALSE(torch::equal(params[0], before[0]));
}

namespace {

// 4 steps into `full`; the same run into `split`, checkpointing every 2 steps, which "crashes" after step 4 lost its
// checkpoint and resumes from step 2: its steps 3 and 4 must equal the full run's, every metric but timings.
void check_resume_exact(const std::string& full, const std::string& split, const std::vector<std::string>& common) {
  ppo::remove_tree(full);
  ppo::remove_tree(split);
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), common.begin(), common.end());
    return extra;
  };
  {
    ppo::Config c = tiny_config(full, with({"trainer.total_training_steps=4"}));
    train(c);
  }
  {
    ppo::Config c = tiny_config(
        split, with({"trainer.total_training_steps=4", "trainer.save_freq=2", "trainer.max_ckpt_to_keep=0"}));
    train(c);
  }
  ppo::remove_tree(split + "/checkpoints/global_step_4");
  std::ofstream(split + "/checkpoints/latest_checkpointed_iteration.txt") << 2 << "\n";
  {
    ppo::Config c = tiny_config(split, with({"trainer.total_training_steps=4", "trainer.save_freq=2"}));
    train(c);  // resumes at step 2
  }
  CHECK(fs::exists(split + "/metrics.orphaned.jsonl"));  // the lost steps' lines were kept aside, not deleted
  auto a = read_metrics(full), b = read_metrics(split);
  REQUIRE(a.size() == 4);
  REQUIRE(b.size() == 4);
  int compared = 0;
  for (size_t i = 2; i < 4; ++i) {
    for (auto& [key, value] : a[i].items()) {
      if (key.rfind("timing_s/", 0) == 0 || key.rfind("perf/", 0) == 0 || key.rfind("memory/", 0) == 0) continue;
      INFO("step " << i + 1 << " " << key);
      REQUIRE(b[i].contains(key));
      CHECK(value == b[i][key]);
      ++compared;
    }
  }
  CHECK(compared > 40);
  CHECK(fs::exists(split + "/checkpoints/latest_checkpointed_iteration.txt"));
}

// GRPO with DAPO dynamic sampling (groups whose scores all agree are dropped; a low temperature makes such groups
// common) and a two-stage curriculum over the tiny task's difficulties: 2 digits for steps 1-2, 3 digits after.
const std::vector<std::string> kDynamicSampling = {"trainer.test_freq=0",
                                                   "trainer.val_before_train=false",
                                                   "algorithm.adv_estimator=grpo",
                                                   "algorithm.filter_groups.enable=true",
                                                   "algorithm.filter_groups.metric=score",
                                                   "rollout.temperature=0.3",
                                                   "data.curriculum.difficulties=[2, 3]",
                                                   "data.curriculum.steps_per_stage=2"};

}  // namespace

TEST_CASE("resume is exact: 2 + 2 steps equal 4 steps", "[cpu][trainer]") {
  ppo_test::TempDir tmp;
  check_resume_exact(
      tmp.sub("resume_full"), tmp.sub("resume_split"),
      {"trainer.test_freq=0", "trainer.val_before_train=false", "algorithm.use_kl_in_reward=true",
       "algorithm.kl_ctrl.type=adaptive", "actor.optim.warmup_style=cosine", "actor.optim.lr_warmup_steps=2"});
}

TEST_CASE("resume is exact under DAPO dynamic sampling and a curriculum stage change", "[cpu][trainer]") {
  ppo_test::TempDir tmp;
  // Stage 2 begins at step 3, the first step after the resume; dynamic sampling takes more generation batches than
  // steps, so the resumed run must continue from the sampler's position saved in trainer_state.json.
  check_resume_exact(tmp.sub("resume_dapo_full"), tmp.sub("resume_dapo_split"), kDynamicSampling);
  const auto lines = read_metrics(tmp.sub("resume_dapo_full"));
  double batches = 0;
  for (const auto& line : lines) batches += line["train/num_gen_batches"].get<double>();
  CHECK(batches > 4);  // some step took more than one generation batch
  std::ifstream state_file(tmp.sub("resume_dapo_split") + "/checkpoints/global_step_2/trainer_state.json");
  const nlohmann::json state = nlohmann::json::parse(state_file);
  CHECK(state["gen_batches"].get<double>() ==
        lines[0]["train/num_gen_batches"].get<double>() + lines[1]["train/num_gen_batches"].get<double>());
  // The curriculum: stage 0 then 1; 2-digit prompts then 3-digit ones (the prompt is the digits and '>').
  for (size_t i = 0; i < 4; ++i) {
    INFO("step " << i + 1);
    CHECK(lines[i]["training/curriculum_stage"].get<double>() == (i < 2 ? 0 : 1));
    CHECK(lines[i]["prompt_length/min"].get<double>() == lines[i]["prompt_length/max"].get<double>());
  }
  CHECK(lines[2]["prompt_length/min"].get<double>() == lines[0]["prompt_length/min"].get<double>() + 1);
  // Every group trained on has signal: kept_fraction of the generated groups, the rest evicted. The entropy is the
  // token-weighted mean of its classes by advantage sign, so it lies between the smallest and the largest of them.
  for (const auto& line : lines) {
    double low = INFINITY, high = -INFINITY;
    for (const char* name : {"actor/entropy_pos_adv", "actor/entropy_neg_adv", "actor/entropy_zero_adv"})
      if (line.contains(name))
        low = std::min(low, line[name].get<double>()), high = std::max(high, line[name].get<double>());
    const double entropy = line["actor/entropy"].get<double>();
    CHECK(low <= entropy + 1e-9);
    CHECK(entropy <= high + 1e-9);
    CHECK(line.contains("actor/entropy_incorrect"));  // the tiny model is mostly wrong yet
    const double kept = line["training/filter_groups/kept_fraction"].get<double>();
    CHECK(kept > 0);
    CHECK(kept <= 1);
  }
}

TEST_CASE("resume is exact with a normalising reward model: its running moments are in the checkpoint",
          "[cpu][trainer][reward_model]") {
  ppo_test::TempDir tmp;
  ppo_test::write_reward_model(tmp.sub("rm"));
  check_resume_exact(
      tmp.sub("resume_rm_full"), tmp.sub("resume_rm_split"),
      {"trainer.test_freq=0", "trainer.val_before_train=false", "reward_model.enable=true",
       "reward_model.model.path=" + tmp.sub("rm"), "reward_model.normalize=true", "reward_model.rule_weight=1"});
  std::ifstream state_file(tmp.sub("resume_rm_split") + "/checkpoints/global_step_2/trainer_state.json");
  const nlohmann::json state = nlohmann::json::parse(state_file);
  CHECK(state["reward_moments"]["count"] == 2 * 16 * 4);  // 2 steps of 16 prompts x 4 responses
  const auto lines = read_metrics(tmp.sub("resume_rm_full"));
  CHECK(lines[3]["critic/score/mean"].get<double>() != lines[3]["reward/rule/mean"].get<double>());
}

TEST_CASE("a curriculum of datasets trains on each file in order and a stage smaller than a batch is an error",
          "[cpu][trainer]") {
  ppo_test::TempDir tmp;
  // Three files of 2-, 4- and 3-digit prompts (the reverse prompt is the digits and '>'), 2 steps each.
  const std::string dir = tmp.sub("curriculum_files");
  ppo::remove_tree(dir);
  fs::create_directories(dir);
  auto task = ppo::make_task("reverse");
  std::string files;
  for (int64_t digits : {2, 4, 3}) {
    const std::string file = dir + "/d" + std::to_string(digits) + ".jsonl";
    ppo::write_jsonl(*task, task->generate(32, digits, digits, static_cast<uint64_t>(digits)), file);
    files += (files.empty() ? "" : ",") + file;
  }
  const std::vector<std::string> overrides = {"trainer.test_freq=0",
                                              "trainer.val_before_train=false",
                                              "trainer.write_checkpoints=false",
                                              "trainer.total_training_steps=0",
                                              "data.curriculum.train_files=[" + files + "]",
                                              "data.curriculum.steps_per_stage=2",
                                              "data.max_prompt_length=8"};
  {
    ppo::Config c = tiny_config(dir + "/run", overrides);
    CHECK(ppo::check_config(c, 1).total_training_steps == 6);  // steps_per_stage x stages; the config keeps its 0
    train(c);
  }
  const auto lines = read_metrics(dir + "/run");
  REQUIRE(lines.size() == 6);
  const double bos = lines[0]["prompt_length/min"].get<double>() - 3;  // 2 digits and '>'
  for (size_t i = 0; i < 6; ++i) {
    INFO("step " << i + 1);
    const int64_t digits = std::vector<int64_t>{2, 2, 4, 4, 3, 3}[i];
    CHECK(lines[i]["training/curriculum_stage"].get<double>() == static_cast<double>(i / 2));
    CHECK(lines[i]["prompt_length/min"].get<double>() == bos + static_cast<double>(digits) + 1);
    CHECK(lines[i]["prompt_length/max"].get<double>() == bos + static_cast<double>(digits) + 1);
  }
  // A stage with fewer prompts than a batch stops at start-up, naming it.
  ppo::write_jsonl(*task, task->generate(8, 3, 3, 5), dir + "/small.jsonl");
  std::vector<std::string> small = overrides;
  small.push_back("data.curriculum.train_files=[" + dir + "/d2.jsonl," + dir + "/small.jsonl]");
  ppo::Config c = tiny_config(dir + "/small_run", small);
  try {
    ppo::Run run(c, ppo::Context::get(), ppo::RunMode::train);
    ppo::PpoSteps steps(run);
    FAIL("no error");
  } catch (const ppo::UsageError& e) {
    CHECK_THAT(e.what(), Catch::Contains("data.curriculum: stage 2 (" + dir +
                                         "/small.jsonl) has 8 prompts, fewer than data.train_batch_size=16"));
  }
}

TEST_CASE("rollout correction in fp32: the gap is rounding, every weight is 1, the run equals the run without",
          "[cpu][trainer]") {
  ppo_test::TempDir tmp;
  // The rollout's log-probs come from the KV-cache decode, old_log_probs from the full forward: in fp32 they differ
  // by rounding only, so token weights exp(old - rollout) are 1 to ~1e-6 and the corrected run follows the
  // uncorrected one (metrics to 1e-4 relative over 4 steps).
  auto [a, b] = train_off_on(tmp.sub("rollout_corr_off"), tmp.sub("rollout_corr_on"), 4,
                             {"algorithm.rollout_correction.rollout_is=token"});
  REQUIRE(a.size() == 4);
  REQUIRE(b.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    INFO("step " << i + 1);
    CHECK(a[i]["training/rollout_probs_diff_max"].get<double>() < 1e-5);
    CHECK(std::abs(a[i]["rollout_corr/kl"].get<double>()) < 1e-6);
    CHECK_FALSE(a[i].contains("rollout_corr/rollout_is_mean"));
    CHECK(std::abs(b[i]["rollout_corr/rollout_is_mean"].get<double>() - 1) < 1e-5);
    CHECK(b[i]["rollout_corr/rollout_is_max"].get<double>() < 1 + 1e-5);
    CHECK(b[i]["rollout_corr/rollout_is_masked_fraction"].get<double>() == 0);
    for (const char* key : {"critic/score/mean", "actor/pg_loss", "actor/ppo_kl", "actor/entropy", "actor/grad_norm"}) {
      INFO(key);
      const double x = a[i][key].get<double>(), y = b[i][key].get<double>();
      CHECK(std::abs(x - y) <= 1e-4 * std::max(std::abs(x), std::abs(y)) + 1e-7);
    }
  }
}

TEST_CASE("DAPO overlong punishment lowers step 1's score by exactly the logged penalty", "[cpu][trainer]") {
  ppo_test::TempDir tmp;
  // Step 1 samples the same responses with or without it (rewards come after generation), so the mean score with
  // the punishment is the mean score without it plus the mean penalty. A buffer of the whole response length
  // punishes every response, in proportion to its length.
  auto [a, b] = train_off_on(tmp.sub("overlong_off"), tmp.sub("overlong_on"), 1,
                             {"reward.overlong_buffer.enable=true", "reward.overlong_buffer.len=6",
                              "reward.overlong_buffer.penalty_factor=0.5"});
  REQUIRE(a.size() == 1);
  REQUIRE(b.size() == 1);
  CHECK_FALSE(a[0].contains("reward/overlong_reward/mean"));
  const double penalty = b[0]["reward/overlong_reward/mean"].get<double>();
  // Every response has >= 1 token: each loses 0.5 * length / 6, at least 1/12.
  CHECK(penalty <= -0.5 / 6);
  CHECK(b[0]["reward/overlong/mean"].get<double>() == 1.0);
  CHECK(b[0]["response_length/mean"].get<double>() == a[0]["response_length/mean"].get<double>());
  CHECK(b[0]["critic/score/mean"].get<double>() ==
        Approx(a[0]["critic/score/mean"].get<double>() + penalty).margin(1e-6));
  CHECK(penalty == Approx(-0.5 * a[0]["response_length/mean"].get<double>() / 6).margin(1e-6));
}

TEST_CASE("mask_truncated_completions: cut-off responses leave the rewards and losses, not the length metrics",
          "[cpu][trainer]") {
  ppo_test::TempDir tmp;
  // Step 1 samples the same responses either way. The tiny random model rarely ends a response (EOS ~1 in 99 per
  // token), so most of them are cut off at 6 tokens; their (positive, partial-credit) rewards leave
  // critic/rewards/mean, while the scores and the length metrics stay as they are.
  auto [a, b] =
      train_off_on(tmp.sub("truncated_off"), tmp.sub("truncated_on"), 1, {"algorithm.mask_truncated_completions=true"});
  REQUIRE(a.size() == 1);
  REQUIRE(b.size() == 1);
  const double clipped = a[0]["response_length/clip_ratio"].get<double>();
  CHECK(clipped > 0.5);
  for (const char* key :
       {"response_length/mean", "response_length/clip_ratio", "prompt_length/mean", "critic/score/mean"}) {
    INFO(key);
    CHECK(b[0][key].get<double>() == a[0][key].get<double>());
  }
  CHECK(b[0]["critic/rewards/mean"].get<double>() < a[0]["critic/rewards/mean"].get<double>());
  CHECK(b[0]["critic/rewards/mean"].get<double>() >= 0);
}

TEST_CASE("dynamic sampling assembles whole groups of generation batches of other widths as one dispatched batch",
          "[cpu][trainer]") {
  ppo_test::TempDir tmp;
  ppo::Config c = tiny_config(tmp.sub("groups"));
  const auto owned = ppo::Actor::policy(c, 99, /*total_optimizer_steps=*/10);
  ppo::Actor& actor = *owned;
  auto task = ppo::make_task(c.data.task);
  auto tokenizer = ppo::make_tokenizer("char");
  // Two generation batches of 2 prompts x 2 responses, of 2 and of 5 digits: their prompt widths differ.
  auto generate = [&](int64_t digits, uint64_t seed) {
    ppo::RankPrompts prompts =
        ppo::rank_prompts(task->generate(2, digits, digits, seed), *tokenizer, c, 2, 1, 0, false);
    ppo::Batch b = ppo::rollout_batch(actor.model(), *tokenizer, prompts, {2, 1.0, -1, 1.0, 0}, c);
    for (const char* name : {"scores", "correct", "has_correct", "format_ok"}) b.set(name, torch::ones({4}));
    b.set("token_scores", torch::ones(b.at("responses").sizes()));
    return b;
  };
  const ppo::Batch a = generate(2, 1), b = generate(5, 2);
  const int64_t P = b.at("prompts").size(1), extra = P - a.at("prompts").size(1);
  REQUIRE(extra > 0);
  const ppo::Batch all = ppo::concat_generations({a, b}, tokenizer->pad_id());
  all.check();
  REQUIRE(all.size() == 8);
  CHECK(all.at("prompts").size(1) == P);
  // a's rows: the same tokens, attention and positions behind `extra` more padding columns; and the same log-probs.
  auto a_rows = [&](const torch::Tensor& t) { return t.narrow(0, 0, 4).narrow(1, extra, t.size(1) - extra); };
  for (const char* name : {"prompts", "input_ids", "attention_mask", "position_ids"}) {
    INFO(name);
    CHECK(torch::equal(a_rows(all.at(name)), a.at(name)));
  }
  CHECK(all.at("attention_mask").narrow(0, 0, 4).narrow(1, 0, extra).sum().item<int64_t>() == 0);
  CHECK((all.at("prompts").narrow(0, 0, 4).narrow(1, 0, extra) == tokenizer->pad_id()).all().item<bool>());
  CHECK(torch::equal(all.at("responses"), torch::cat({a.at("responses"), b.at("responses")})));
  const torch::Tensor padded = actor.compute_log_probs(all, ppo::MicroBatchSpec{8}).narrow(0, 0, 4);
  const torch::Tensor alone = actor.compute_log_probs(a, ppo::MicroBatchSpec{4});
  CHECK(((padded - alone).abs() * a.at("response_mask")).max().item<double>() < 1e-5);

  // Three groups (rows 0, 2 and 4) over 2 ranks with padding: rank 0 takes positions 0 and 1, rank 1 position 2 and
  // a masked copy of position 0. One rank takes all three in order.
  const std::vector<int64_t> groups = {0, 2, 4};
  const ppo::Batch one = ppo::dispatch_groups(all, groups, 2, 3, 1, 0, true);
  CHECK(torch::equal(one.at("group_id"), torch::tensor(std::vector<int64_t>{0, 0, 1, 1, 2, 2})));
  CHECK(torch::equal(one.at("input_ids"), all.at("input_ids").narrow(0, 0, 6)));
  const ppo::Batch rank0 = ppo::dispatch_groups(all, groups, 2, 3, 2, 0, true);
  const ppo::Batch rank1 = ppo::dispatch_groups(all, groups, 2, 3, 2, 1, true);
  CHECK(torch::equal(rank0.at("input_ids"), all.at("input_ids").narrow(0, 0, 4)));
  CHECK(torch::equal(rank1.at("group_id"), torch::tensor(std::vector<int64_t>{2, 2, -1, -1})));
  CHECK(torch::equal(rank1.at("prompt_index"), torch::tensor(std::vector<int64_t>{2, 2, 0, 0})));
  CHECK(torch::equal(rank1.at("input_ids").narrow(0, 0, 2), all.at("input_ids").narrow(0, 4, 2)));
  CHECK(torch::equal(rank1.at("input_ids").narrow(0, 2, 2), all.at("input_ids").narrow(0, 0, 2)));
  CHECK(torch::equal(rank1.at("sample_mask"), torch::tensor(std::vector<float>{1, 1, 0, 0})));
  CHECK(rank1.at("response_mask").narrow(0, 2, 2).sum().item<double>() == 0);
  CHECK(rank1.at("response_mask").narrow(0, 0, 2).sum().item<double>() > 0);
  for (const char* name : {"scores", "correct", "has_correct", "format_ok", "token_scores"}) {
    INFO(name);
    CHECK(rank1.at(name).narrow(0, 2, 2).abs().sum().item<double>() == 0);
  }
}

TEST_CASE("token-budget micro-batches give the gradients of fixed micro-batches", "[cpu][trainer][memory]") {
  ppo_test::TempDir tmp;
  ppo::Config c = tiny_config(tmp.sub("dynamic_bsz"));
  const auto owned = ppo::Actor::policy(c, 99, /*total_optimizer_steps=*/10);
  ppo::Actor& actor = *owned;
  ppo::Batch batch = sample_batch(c, actor);  // 8 responses of different lengths
  const double tokens = batch.at("response_mask").sum().item<double>();
  auto gradients = [&](const ppo::MicroBatchSpec& spec, size_t* count) {
    actor.optimizer().zero_grad();
    auto micros = ppo::make_micro_batches(batch, spec);
    *count = micros.size();
    for (const ppo::MicroBatch& m : micros) {
      const ppo::Batch& b = m.batch;
      ppo::TokenLogProbs lp = ppo::compute_log_probs(actor.model(), b.at("input_ids"), b.at("attention_mask"),
                                                     b.at("position_ids"), b.at("responses").size(1), 1.0);
      ppo::PolicyLossParams p;
      p.denominator = tokens;
      ppo::policy_loss(b.at("old_log_probs"), lp.log_probs, b.at("advantages"), b.at("response_mask"), p)
          .loss.backward();
    }
    std::vector<torch::Tensor> grads;
    for (auto& param : actor.model()->parameters()) grads.push_back(param.grad().clone().reshape({-1}));
    return torch::cat(grads);
  };
  size_t fixed_count = 0, dynamic_count = 0;
  torch::Tensor fixed = gradients({2, 0, ""}, &fixed_count);
  const int64_t width = batch.at("input_ids").size(1);
  torch::Tensor dynamic = gradients({0, 3 * width, "budget"}, &dynamic_count);
  double diff = (fixed - dynamic).abs().max().item<double>(), scale = fixed.abs().max().item<double>();
  INFO("max |grad(fixed 4 x 2) - grad(token budget, " << dynamic_count << " micro-batches)| = " << diff
                                                      << " (max |grad| " << scale << ")");
  CHECK(fixed_count == 4);
  CHECK(dynamic_count >= 2);
  CHECK(scale > 0);
  CHECK(diff <= 1e-5 * scale);
  // Trimmed micro-batches compute the same log-probs as the full-width batch.
  torch::NoGradGuard no_grad;
  torch::Tensor full = actor.compute_log_probs(batch, ppo::MicroBatchSpec{8}) * batch.at("response_mask");
  torch::Tensor trimmed =
      actor.compute_log_probs(batch, ppo::MicroBatchSpec{0, 2 * width, "budget"}) * batch.at("response_mask");
  double lp_diff = (full - trimmed).abs().max().item<double>();
  INFO("max |log-prob(full width) - log-prob(trimmed)| = " << lp_diff);
  CHECK(lp_diff <= 1e-5);
}

TEST_CASE("packed and padded updates give the same 10-step runs, for every advantage estimator",
          "[cpu][trainer][packing]") {
  ppo_test::TempDir tmp;
  const std::vector<std::string> modes = {"token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                                          "seq-mean-token-sum-norm"};
  size_t index = 0;
  for (const ppo::AdvEstimatorSpec& estimator : ppo::adv_estimators()) {
    // Each estimator with one aggregation mode in turn; every other run with gradient checkpointing and token
    // budgets (the packed budget counts real tokens, so its micro-batches differ from the padded run's).
    const std::string mode = modes[index % modes.size()];
    const bool memory_options = index % 2 == 1;
    ++index;
    const std::string name = estimator.name;
    INFO(name << ", loss_agg_mode " << mode << (memory_options ? ", checkpointing and token budgets" : ""));
    std::vector<std::vector<nlohmann::json>> runs;
    for (const std::string packed : {"true", "false"}) {
      const std::string dir = tmp.sub(name + "_" + packed);
      std::vector<std::string> overrides = {"algorithm.adv_estimator=" + name,
                                            "actor.loss_agg_mode=" + mode,
                                            "critic.loss_agg_mode=" + mode,
                                            "actor.use_remove_padding=" + packed,
                                            "critic.use_remove_padding=" + packed,
                                            "actor.use_kl_loss=true",
                                            "actor.entropy_coeff=0.01",
                                            "model.attn_implementation=eager",
                                            "trainer.test_freq=0",
                                            "trainer.val_before_train=false",
                                            "trainer.total_training_steps=10",
                                            "trainer.write_checkpoints=false"};
      if (memory_options)
        overrides.insert(
            overrides.end(),
            {"model.enable_gradient_checkpointing=true", "actor.use_dynamic_bsz=true",
             "actor.ppo_max_token_len_per_gpu=48", "critic.use_dynamic_bsz=true", "critic.ppo_max_token_len_per_gpu=48",
             "rollout.log_prob_use_dynamic_bsz=true", "rollout.log_prob_max_token_len_per_gpu=48"});
      ppo::Config c = tiny_config(dir, overrides);
      train(c);
      runs.push_back(read_metrics(dir));
    }
    REQUIRE(runs[0].size() == 10);
    REQUIRE(runs[1].size() == 10);
    double worst = 0;
    std::string worst_key;
    for (size_t step = 0; step < 10; ++step) {
      for (const auto& [key, value] : runs[0][step].items()) {
        if (!value.is_number() || key.rfind("timing_s/", 0) == 0 || key.rfind("perf/", 0) == 0 ||
            key.rfind("memory/", 0) == 0)
          continue;
        INFO("step " << step + 1 << " " << key);
        REQUIRE(runs[1][step].contains(key));
        const double x = value.get<double>(), y = runs[1][step][key].get<double>();
        const double excess = std::abs(x - y) / (1e-4 * std::max(std::abs(x), std::abs(y)) + 1e-5);
        if (excess > worst) worst = excess, worst_key = key;
        CHECK(excess <= 1.0);
      }
    }
    WARN(name << ": largest difference / tolerance " << worst << " (" << worst_key << ")");
  }
}

TEST_CASE("an update reads its metrics from the device once per mini-batch, not per micro-batch",
          "[cpu][trainer][packing]") {
  ppo_test::TempDir tmp;
  for (const std::string packed : {"true", "false"}) {
    INFO("use_remove_padding " << packed);
    ppo::Config c = tiny_config(tmp.sub("reads_" + packed),
                                {"actor.use_remove_padding=" + packed, "critic.use_remove_padding=" + packed});
    const auto owned = ppo::Actor::policy(c, 99, /*total_optimizer_steps=*/10);
    ppo::Actor& actor = *owned;
    ppo::Batch batch = sample_batch(c, actor);  // 8 responses
    batch.set("sample_mask", torch::ones({batch.size()}));
    std::vector<int64_t> reads;
    for (const int64_t micro : {8, 1}) {  // one micro-batch per mini-batch, then eight
      c.actor.ppo_micro_batch_size_per_gpu = micro;
      ppo::Metrics metrics;
      ppo_test::ScalarReadCounter counter;
      actor.update_policy(batch, /*mini_batches=*/2, ppo::Context::get(), metrics);
      reads.push_back(counter.count());
      CHECK(metrics.reduce(ppo::Context::get()).count("actor/pg_loss") == 1);
    }
    INFO("scalar reads with 1 and with 4 micro-batches per mini-batch: " << reads[0] << ", " << reads[1]);
    CHECK(reads[0] == reads[1]);
    // What remains is per mini-batch: the two denominators and the gradient norm (three item() calls, each seen as
    // aten::item and aten::_local_scalar_dense), and the metrics' one tensor copy, which is not an operator call;
    // where AdamW is fused (LibTorch >= 2.4) the kernel also reads each parameter tensor's step, on the CPU (both
    // operators again). Measured: 12 on LibTorch 1.13, 92 on 2.11. Before, each micro-batch read ~9.
    const int64_t tensors = static_cast<int64_t>(actor.model()->parameters().size());
    CHECK(reads[0] <= 2 * (3 + (ppo::fused_adamw_available() ? tensors : 0)) * 2);
  }
}
