// parallel.zero_stage on MPI ranks: the same numbers as one rank unsharded, the memory it saves, checkpoints that
// resume on any number of ranks, the collective-sequence check and the bad inputs of sharded checkpoints.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/config.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "tests/paths.h"
#include "tests/reference/reference.h"
#include "tests/same_runs.h"
#include "tests/temp_dir.h"
#include "workers/actor.h"

namespace fs = std::filesystem;
using ppo_test::check_same;
using ppo_test::kRankTolerance;
using ppo_test::metrics;
using ppo_test::mpirun;
using ppo_test::run;
using ppo_test::Run;
using ppo_test::train;

namespace {

// Several micro-batches per mini-batch (gradients accumulate), two mini-batches per step (updates between them).
const std::string kMicro = "actor.ppo_micro_batch_size_per_gpu=4 critic.ppo_micro_batch_size_per_gpu=4 ";

std::string stage(int s) {
  return " parallel.zero_stage=" + std::to_string(s);
}

// The last step's value of a metric.
double last(const std::string& dir, const std::string& key) {
  return metrics(dir).back().at(key).get<double>();
}

// Every metric of the steps both runs logged agrees to `rtol` (timings and memory aside).
void check_same_steps(const std::string& a, const std::string& b, double rtol) {
  std::map<int64_t, nlohmann::json> by_step;
  for (const auto& m : metrics(b)) by_step[m.at("training/global_step").get<int64_t>()] = m;
  int64_t compared = 0;
  for (const auto& m : metrics(a)) {
    const int64_t step = m.at("training/global_step").get<int64_t>();
    if (!by_step.count(step)) continue;
    ++compared;
    for (auto& [key, value] : m.items()) {
      if (ppo_test::skip_key(key) || !value.is_number()) continue;
      INFO("step " << step << " " << key);
      REQUIRE(by_step[step].contains(key));
      const double x = value.get<double>(), y = by_step[step][key].get<double>();
      CHECK(std::abs(x - y) <= rtol * std::max(std::abs(x), std::abs(y)) + 1e-6);
    }
  }
  CHECK(compared >= 2);
}

}  // namespace

TEST_CASE("ZeRO stages 1, 2 and 3 on 2 and 4 ranks equal 1 rank unsharded", "[mpi][zero]") {
  ppo_test::TempDir tmp;
  const std::string base = tmp.sub("base");
  Run b = train(0, base, kMicro);
  REQUIRE(b.status == 0);
  for (int ranks : {2, 4})
    for (int s : {1, 2, 3}) {
      const std::string dir = tmp.sub("r" + std::to_string(ranks) + "s" + std::to_string(s));
      Run r = train(ranks, dir, kMicro + stage(s) + " parallel.check_params_freq=1");
      INFO(ranks << " ranks, stage " << s << "\n" << r.output);
      REQUIRE(r.status == 0);
      check_same(base, dir, kRankTolerance);
    }
}

TEST_CASE("ZeRO stage 3 with checkpointing, each offload flag, a reference model and token budgets equals 1 rank",
          "[mpi][zero]") {
  ppo_test::TempDir tmp;
  const std::string kl = "actor.use_kl_loss=true ";
  const std::string base = tmp.sub("base");
  Run b = train(0, base, kMicro + kl);
  REQUIRE(b.status == 0);
  const std::vector<std::string> options = {
      "model.enable_gradient_checkpointing=true",
      "actor.offload.param=true critic.offload.param=true ref.offload.param=true",
      "actor.offload.grad=true critic.offload.grad=true", "actor.offload.optimizer=true critic.offload.optimizer=true",
      "actor.use_dynamic_bsz=true actor.ppo_max_token_len_per_gpu=60 critic.use_dynamic_bsz=true "
      "critic.ppo_max_token_len_per_gpu=60"};
  for (size_t i = 0; i < options.size(); ++i)
    for (int s : {2, 3}) {
      const std::string dir = tmp.sub("o" + std::to_string(i) + "s" + std::to_string(s));
      Run r = train(2, dir, kMicro + kl + options[i] + stage(s));
      INFO(options[i] << ", stage " << s << "\n" << r.output);
      REQUIRE(r.status == 0);
      check_same(base, dir, kRankTolerance);
    }
}

TEST_CASE("ZeRO stage 3 with DAPO's dynamic sampling on 2 ranks equals 1 rank", "[mpi][zero]") {
  ppo_test::TempDir tmp;
  // Several generation batches per step (see the DAPO test of test_mpi.cpp), each a whole-policy gather.
  const std::string cfg = kMicro +
                          "algorithm.adv_estimator=grpo algorithm.filter_groups.enable=true "
                          "algorithm.filter_groups.metric=score rollout.temperature=0.3";
  REQUIRE(train(0, tmp.sub("one"), cfg).status == 0);
  Run r = train(2, tmp.sub("two"), cfg + stage(3));
  INFO(r.output);
  REQUIRE(r.status == 0);
  check_same(tmp.sub("one"), tmp.sub("two"), kRankTolerance);
}

TEST_CASE("ZeRO on 4 ranks: stage 3 holds at most 0.3x the model state of stage 0, stage 1 0.3x its optimizer state",
          "[mpi][zero][memory]") {
  ppo_test::TempDir tmp;
  std::map<int, std::string> dirs;
  for (int s : {0, 1, 3}) {
    dirs[s] = tmp.sub("s" + std::to_string(s));
    Run r = train(4, dirs[s], kMicro + stage(s));
    INFO(r.output);
    REQUIRE(r.status == 0);
  }
  const double state0 = last(dirs[0], "memory/model_state_mib"), state3 = last(dirs[3], "memory/model_state_mib");
  const double optim0 = last(dirs[0], "memory/optimizer_state_mib"),
               optim1 = last(dirs[1], "memory/optimizer_state_mib");
  WARN("model state per rank: stage 0 " << state0 << " MiB, stage 3 " << state3 << " MiB; optimizer state: stage 0 "
                                        << optim0 << " MiB, stage 1 " << optim1 << " MiB");
  CHECK(state0 > 0);
  CHECK(state3 <= 0.3 * state0);
  CHECK(optim1 <= 0.3 * optim0);
  // Stage 3's rollout gathers the whole policy once, and says how large that copy is.
  CHECK(last(dirs[3], "memory/generation_copy_mib") > 0);
}

TEST_CASE("a checkpoint of 4 ranks at stage 3 resumes on 2 ranks at stage 3 and on 1 rank unsharded", "[mpi][zero]") {
  ppo_test::TempDir tmp;
  const std::string steps = " trainer.total_training_steps=4 trainer.save_freq=2 ";
  const std::string four = tmp.sub("four");
  Run w = train(4, four, kMicro + steps + stage(3));
  INFO(w.output);
  REQUIRE(w.status == 0);
  const std::string checkpoint = four + "/checkpoints/global_step_2";
  REQUIRE(fs::exists(checkpoint + "/actor_optim.3-of-4.safetensors"));
  // The weights as safetensors, written a gathered unit at a time; resumed at stage 3, each rank reads its slices.
  REQUIRE(fs::exists(checkpoint + "/actor.safetensors"));
  REQUIRE(fs::exists(checkpoint + "/critic.safetensors"));
  REQUIRE_FALSE(fs::exists(checkpoint + "/actor.pt"));
  REQUIRE(fs::exists(checkpoint + "/critic_optim.index.json"));
  for (const auto& [ranks, s] : std::vector<std::pair<int, int>>{{2, 3}, {0, 0}}) {
    const std::string name = std::to_string(ranks) + "_" + std::to_string(s);
    const std::string resumed = tmp.sub("resumed" + name), whole = tmp.sub("whole" + name);
    Run r = train(ranks, resumed, kMicro + steps + stage(s) + " trainer.resume_mode=" + checkpoint);
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK_THAT(r.output, Catch::Contains("resumed from"));
    Run u = train(ranks, whole, kMicro + steps + stage(s));
    REQUIRE(u.status == 0);
    check_same_steps(resumed, whole, kRankTolerance);  // steps 3 and 4
  }
  // And back: an unsharded 1-rank checkpoint resumes on 4 ranks at stage 3.
  const std::string back = tmp.sub("back");
  Run r =
      train(4, back,
            kMicro + steps + stage(3) + " trainer.resume_mode=" + tmp.sub("whole0_0") + "/checkpoints/global_step_2");
  INFO(r.output);
  REQUIRE(r.status == 0);
  check_same_steps(back, tmp.sub("whole0_0"), kRankTolerance);

  // ppo eval reads the sharded checkpoint directly.
  Run eval = run(ppo_test::paths().ppo_binary + " eval --config " + ppo_test::paths().source_dir +
                 "/configs/regression_tiny.yaml trainer.num_threads=1 --checkpoint " + checkpoint);
  INFO(eval.output);
  CHECK(eval.status == 0);
  CHECK_THAT(eval.output, Catch::Contains("difficulty"));

  // ppo export reads the sharded checkpoint directly: its tensors are the checkpoint's weights, and equal (to the
  // ranks' tolerance) those the 1-rank run wrote at the same step.
  const std::string exported = tmp.sub("export4"), exported1 = tmp.sub("export1");
  Run e = run(ppo_test::paths().ppo_binary + " export --checkpoint " + checkpoint + " --out " + exported);
  INFO(e.output);
  REQUIRE(e.status == 0);
  Run e1 = run(ppo_test::paths().ppo_binary + " export --checkpoint " + tmp.sub("whole0_0") +
               "/checkpoints/global_step_2 --out " + exported1);
  REQUIRE(e1.status == 0);
  auto a = ppo::load_safetensors_dir(exported), b = ppo::load_safetensors_dir(exported1);
  ppo::Config c = ppo::load_config({ppo_test::paths().source_dir + "/configs/regression_tiny.yaml"}, {});
  ppo::CausalLM model(c.model, 99);
  ppo::load_module(*model, checkpoint + "/actor.safetensors");
  REQUIRE(a.size() == b.size());
  for (const auto& item : model->named_parameters()) {
    INFO(item.key());
    REQUIRE(a.count(item.key()) == 1);
    CHECK(torch::equal(a.at(item.key()), item.value()));
    CHECK(torch::allclose(a.at(item.key()), b.at(item.key()), 3e-4, 1e-5));
  }
}

TEST_CASE("a rank issuing a collective the others do not ends the job naming both, not a hang", "[mpi][zero]") {
  ppo_test::TempDir tmp;
  Run r = run("PPO_FAULT_EXTRA_COLLECTIVE=1 timeout -k 5 120 " + mpirun(2) + "-x PPO_FAULT_EXTRA_COLLECTIVE " +
              ppo_test::paths().ppo_binary + " train --config " + ppo_test::paths().source_dir +
              "/configs/regression_tiny.yaml trainer.output_dir=" + tmp.sub("extra") +
              " trainer.val_before_train=false trainer.num_threads=1" + stage(3));
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.status != 124);  // not ended by `timeout`
  CHECK_THAT(r.output, Catch::Contains("ranks issue different collectives at collective"));
  CHECK_THAT(r.output, Catch::Contains("rank 1 barrier"));
  CHECK(r.seconds < 60);
}

TEST_CASE("a sharded checkpoint with a part missing or from another save, and zero_stage=4, are errors",
          "[mpi][zero][reliability]") {
  ppo_test::TempDir tmp;
  const std::string steps = " trainer.total_training_steps=2 trainer.save_freq=1 ";
  const std::string two_ranks = tmp.sub("two_ranks");
  Run w = train(2, two_ranks, kMicro + steps + stage(1));
  INFO(w.output);
  REQUIRE(w.status == 0);
  auto resume = [&](const std::string& checkpoint, const std::string& extra) {
    return train(0, tmp.sub("resume"), kMicro + steps + " trainer.resume_mode=" + checkpoint + " " + extra);
  };
  auto one_error_line = [](const Run& r, const std::string& text) {
    INFO(r.output);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Catch::Contains("error: ") && Catch::Contains(text));
  };
  const std::string one = two_ranks + "/checkpoints/global_step_1", two = two_ranks + "/checkpoints/global_step_2";

  SECTION("a part missing") {
    fs::remove(two + "/actor_optim.1-of-2.safetensors");
    one_error_line(resume(two, ""), "actor_optim.1-of-2.safetensors");
  }
  SECTION("a part of another save: the manifest names it, and without the manifest its tag does") {
    fs::copy_file(one + "/critic_optim.0-of-2.safetensors", two + "/critic_optim.0-of-2.safetensors",
                  fs::copy_options::overwrite_existing);
    one_error_line(resume(two, ""), "critic_optim.0-of-2.safetensors");
    fs::remove(two + "/manifest.json");
    one_error_line(resume(two, "trainer.accept_checkpoints_without_manifest=true"), "a part of another save");
  }
  SECTION("zero_stage=4") {
    one_error_line(train(0, tmp.sub("four_stage"), "parallel.zero_stage=4"), "parallel.zero_stage=4");
  }
}

namespace {

// `ppo generate --jsonl` of `count` validation prompts of `config`, greedy, from the folder `model_path`, on `ranks`
// ranks (0: no mpirun). Each response comes with its summed log-probs (17 digits): equal outputs need equal logits.
Run generate_greedy(int ranks, const std::string& config, const std::string& model_path, int count,
                    const std::string& extra) {
  return run((ranks > 0 ? mpirun(ranks) : std::string()) + ppo_test::paths().ppo_binary + " generate --config " +
             ppo_test::paths().source_dir + "/configs/" + config + " model.path=" + model_path +
             " model.attn_implementation=eager rollout.temperature=0 rollout.n=1 trainer.num_threads=1 --count " +
             std::to_string(count) + " --jsonl " + extra);
}

// SmolLM2 with K&K prompts of 2 people, 12 new tokens.
const std::string kSmolLM2 = "data.max_difficulty=2 data.max_response_length=12 data.val_batch_size=8 ";
// The tiny model's 6 prompts in one batch, which 1, 2 and 3 ranks split evenly.
const std::string kTinyBatch = "data.val_batch_size=6 ";

}  // namespace

TEST_CASE(
    "ZeRO-3 reads a Hugging Face folder a slice per rank (SmolLM2-135M on 2 ranks, an indexed folder on 2 and 3, "
    "generate as when read whole)",
    "[mpi][zero][hf]") {
  ppo_test::TempDir tmp;
  const std::string smollm2 = ppo_test::ref_path("smollm2-135m-instruct");
  const Run whole = generate_greedy(0, "kk_smollm2.yaml", smollm2, 2, kSmolLM2);
  INFO(whole.output);
  REQUIRE(whole.status == 0);
  REQUIRE_THAT(whole.output, Catch::Contains("\"log_prob\""));
  const Run sharded = generate_greedy(2, "kk_smollm2.yaml", smollm2, 2, kSmolLM2 + stage(3));
  INFO(sharded.output);
  REQUIRE(sharded.status == 0);
  CHECK(sharded.output == whole.output);

  // An indexed folder (model.safetensors.index.json and its shards): a checkpoint of the tiny model exported in shards
  // of at most 40 kB.
  const std::string tiny_run = tmp.sub("tiny_run"), indexed = tmp.sub("indexed");
  REQUIRE(train(0, tiny_run, "").status == 0);
  const Run exported = run(ppo_test::paths().ppo_binary + " export --checkpoint " + tiny_run +
                           "/checkpoints/global_step_3 --out " + indexed + " --max-shard-bytes 40000");
  INFO(exported.output);
  REQUIRE(exported.status == 0);
  REQUIRE(fs::exists(indexed + "/model.safetensors.index.json"));
  const Run tiny_whole = generate_greedy(0, "regression_tiny.yaml", indexed, 6, kTinyBatch);
  INFO(tiny_whole.output);
  REQUIRE(tiny_whole.status == 0);
  // On 3 ranks too: a world size that is not a power of two, whose slices of each unit are thirds.
  for (int ranks : {2, 3}) {
    const Run tiny_sharded = generate_greedy(ranks, "regression_tiny.yaml", indexed, 6, kTinyBatch + stage(3));
    INFO(ranks << " ranks:\n" << tiny_sharded.output);
    REQUIRE(tiny_sharded.status == 0);
    CHECK(tiny_sharded.output == tiny_whole.output);
  }
}

TEST_CASE("ZeRO-3's sharded loading of a damaged Hugging Face folder is one error on every rank", "[mpi][zero][hf]") {
  ppo_test::TempDir tmp;
  const std::string smollm2 = ppo_test::ref_path("smollm2-135m-instruct");
  // The folder with its one file cut short, and with config.json's intermediate_size no longer that of the weights:
  // one error naming the file, or the tensor and its shapes, and every rank ends (within the time limit).
  const std::string cut = tmp.sub("cut"), other = tmp.sub("other_shape");
  fs::create_directories(cut);
  fs::create_directories(other);
  for (const auto& entry : fs::directory_iterator(smollm2)) {
    const fs::path name = entry.path().filename();
    if (name == "model.safetensors") {
      fs::create_symlink(entry.path(), other / name);
    } else if (name == "config.json") {
      nlohmann::json config = nlohmann::json::parse(std::ifstream(entry.path()));
      config["intermediate_size"] = 1000;
      std::ofstream(other + "/config.json") << config.dump();
      fs::copy_file(entry.path(), cut / name);
    } else {
      fs::copy_file(entry.path(), other / name);
      fs::copy_file(entry.path(), cut / name);
    }
  }
  {
    std::ifstream in(smollm2 + "/model.safetensors", std::ios::binary);
    std::vector<char> bytes(fs::file_size(smollm2 + "/model.safetensors") - 4096);
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    std::ofstream(cut + "/model.safetensors", std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  for (const auto& [folder, named] : std::vector<std::pair<std::string, std::string>>{
           {cut, cut + "/model.safetensors"}, {other, "'model.layers.0.mlp.gate_proj.weight' has shape"}}) {
    Run damaged = generate_greedy(2, "kk_smollm2.yaml", folder, 2, kSmolLM2 + stage(3));
    INFO(damaged.output);
    CHECK(damaged.status == 2);
    CHECK_THAT(damaged.output, Catch::Contains("error: ") && Catch::Contains(named));
    CHECK(damaged.seconds < 120);
  }
}

namespace {

// The model keys of a family's oddities on the tiny config's shape (width 64, 4 heads): heads of 32 (twice 64 / 4),
// Qwen3's q/k norms with yarn over 8 positions, Mistral's 4-token sliding window (the tiny task's sequences run to
// 14) with llama3 scaling.
std::string family_keys(const std::string& family) {
  if (family == "qwen3_moe")  // 8 experts 32 wide, top-2 unnormalised, layer 1 dense
    return " model.model_type=qwen3_moe model.qk_norm=true model.moe.num_experts=8 model.moe.num_experts_per_tok=2"
           " model.moe.intermediate_size=32 model.moe.norm_topk_prob=false model.moe.mlp_only_layers=[1] ";
  if (family == "mixtral")  // 4 experts as wide as the MLP, top-2 renormalised, with the z-loss too
    return " model.model_type=mixtral model.moe.num_experts=4 model.moe.num_experts_per_tok=2"
           " model.moe.router_z_loss_coef=0.001 ";
  if (family == "qwen3")
    return " model.model_type=qwen3 model.head_dim=32 model.qk_norm=true model.rope_scaling.rope_type=yarn"
           " model.rope_scaling.factor=4 model.rope_scaling.original_max_position_embeddings=8 ";
  return " model.model_type=mistral model.head_dim=32 model.sliding_window=4 model.rope_scaling.rope_type=llama3"
         " model.rope_scaling.factor=8 model.rope_scaling.original_max_position_embeddings=16 ";
}

}  // namespace

TEST_CASE(
    "Qwen3, Mistral, Qwen3-MoE and Mixtral folders: PPO with a critic and GRPO (MoE: GRPO with routing replay) at "
    "ZeRO-3 on 2 ranks equal 1 rank, packed equal padded",
    "[mpi][zero][hf]") {
  ppo_test::TempDir tmp;
  for (const std::string family : {"qwen3", "mistral", "qwen3_moe", "mixtral"}) {
    INFO("family " << family);
    // A folder of the family: 3 steps of the tiny task from a seeded init, exported.
    const std::string seed_run = tmp.sub(family + "_seed"), folder = tmp.sub(family + "_hf");
    const Run seeded = train(0, seed_run, family_keys(family));
    INFO(seeded.output);
    REQUIRE(seeded.status == 0);
    const Run exported = run(ppo_test::paths().ppo_binary + " export --checkpoint " + seed_run +
                             "/checkpoints/global_step_3 --out " + folder);
    INFO(exported.output);
    REQUIRE(exported.status == 0);
    std::ifstream config_json(folder + "/config.json");
    const nlohmann::json written = nlohmann::json::parse(config_json);
    CHECK(written.at("model_type") == family);
    CHECK(written.at("head_dim") == (family == "qwen3" || family == "mistral" ? 32 : 16));

    // The MoE families with GRPO only: routing replay pins the policy's experts, but a critic's MoE backbone routes
    // by itself, and a token at a near-tie may go through another expert in runs that round differently.
    const bool moe = family == "qwen3_moe" || family == "mixtral";
    const std::vector<std::string> estimators =
        moe ? std::vector<std::string>{"grpo"} : std::vector<std::string>{"gae", "grpo"};
    for (const std::string& estimator : estimators) {
      INFO("estimator " << estimator);
      // The MoE families replay the rollout's routing (R3) in every forward of the step.
      const std::string from = kMicro + " model.path=" + folder + " algorithm.adv_estimator=" + estimator +
                               (moe ? " actor.router_replay=R3 " : " ");
      const std::string base = tmp.sub(family + estimator + "_1"), sharded = tmp.sub(family + estimator + "_2"),
                        padded = tmp.sub(family + estimator + "_padded");
      Run one = train(0, base, from);
      INFO(one.output);
      REQUIRE(one.status == 0);
      if (moe) {  // the router losses logged, and the old policy's routers agree with the rollout's
        CHECK(last(base, "moe/aux_loss") > 0);
        CHECK(last(base, "moe/expert_load_max") >= 1);
        CHECK(last(base, "moe/routing_mismatch") <= 0.01);
      }
      Run two = train(2, sharded, from + stage(3));
      INFO(two.output);
      REQUIRE(two.status == 0);
      check_same(base, sharded, kRankTolerance);
      Run unpacked = train(0, padded, from + " actor.use_remove_padding=false critic.use_remove_padding=false");
      INFO(unpacked.output);
      REQUIRE(unpacked.status == 0);
      check_same(base, padded, kRankTolerance);
    }
  }
}
