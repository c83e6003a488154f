// The real command on a CUDA device (ctest -L gpu, which exits 77, skipped, without one): the same 3 PPO steps as on
// the CPU, each offload option and checkpointing with the caching allocator's figures, ranks sharing one GPU, and
// rollout ranks.
// Figures are printed with WARN, so a run of `ppo_tests "[gpu]"` on the device lists them.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tests/same_runs.h"
#include "tests/temp_dir.h"

using ppo_test::check_same;
using ppo_test::kRankTolerance;
using ppo_test::metrics;
using ppo_test::Run;
using ppo_test::train;

namespace {

// CUDA against CPU, fp32 both: cuBLAS and the CPU's BLAS sum in different orders (LibTorch leaves TF32 off for
// matmuls), so metrics are held to 1e-4 relative, ten times the N ranks == 1 rank band.
constexpr double kDeviceTolerance = 1e-4;

// Micro-batches of 4 and a reference model (use_kl_loss), so every model and ref.offload take part.
const std::string kConfig =
    "actor.use_kl_loss=true actor.ppo_micro_batch_size_per_gpu=4 critic.ppo_micro_batch_size_per_gpu=4";

// The largest value of `key` over the run's steps.
double max_over_steps(const std::string& dir, const std::string& key) {
  double most = 0;
  for (const auto& line : metrics(dir)) {
    INFO(dir << ": " << key);
    REQUIRE(line.contains(key));
    most = std::max(most, line[key].get<double>());
  }
  return most;
}

Run train_ok(int ranks, const std::string& dir, const std::string& extra, const std::string& prefix = "") {
  Run r = train(ranks, dir, extra, prefix);
  INFO(r.output);
  REQUIRE(r.status == 0);
  return r;
}

}  // namespace

TEST_CASE("3 PPO steps on CUDA equal the CPU run within fp32 tolerance", "[gpu][trainer]") {
  ppo_test::TempDir tmp;
  train_ok(0, tmp.sub("cpu"), kConfig, "CUDA_VISIBLE_DEVICES= ");
  train_ok(0, tmp.sub("cuda"), kConfig);
  // The CPU run's figures come from the counting allocator, the CUDA run's from the caching allocator: both hold the
  // three models' parameters and the two optimizers' state, so both are well above zero.
  CHECK(max_over_steps(tmp.sub("cuda"), "perf/max_memory_allocated_gb") > 0);
  check_same(tmp.sub("cpu"), tmp.sub("cuda"), kDeviceTolerance, /*atol=*/1e-5);
}

TEST_CASE(
    "each offload option and checkpointing on CUDA equal the run without, and the caching allocator shows "
    "what each saves",
    "[gpu][memory]") {
  ppo_test::TempDir tmp;
  train_ok(0, tmp.sub("base"), kConfig);
  struct Option {
    std::string name, settings;
  };
  const std::vector<Option> options = {
      {"param", "actor.offload.param=true critic.offload.param=true ref.offload.param=true"},
      {"grad", "actor.offload.grad=true critic.offload.grad=true"},
      {"optimizer", "actor.offload.optimizer=true critic.offload.optimizer=true"},
      {"checkpointing", "model.enable_gradient_checkpointing=true"},
      {"all",
       "actor.offload.param=true actor.offload.grad=true actor.offload.optimizer=true critic.offload.param=true "
       "critic.offload.grad=true critic.offload.optimizer=true ref.offload.param=true "
       "model.enable_gradient_checkpointing=true"}};
  const std::vector<std::string> figures = {"memory/gen_peak_mib", "memory/update_actor_peak_mib",
                                            "memory/update_actor_added_mib", "memory/host_state_mib"};
  auto report = [&](const std::string& name, const std::string& dir) {
    std::string line = name + ":";
    for (const auto& key : figures) line += " " + key + "=" + std::to_string(max_over_steps(dir, key));
    WARN(line);
  };
  report("none", tmp.sub("base"));
  for (const auto& option : options) {
    const std::string dir = tmp.sub("offload_" + option.name);
    train_ok(0, dir, kConfig + " " + option.settings);
    INFO(option.name);
    report(option.name, dir);
    // Offload moves tensors between device and pinned host memory and back, bit for bit; checkpointing recomputes the
    // same forward.
    check_same(tmp.sub("base"), dir, /*rtol=*/0, /*atol=*/1e-6, /*param_rtol=*/0, /*param_outliers=*/0);
  }
  const auto base = [&](const std::string& key) { return max_over_steps(tmp.sub("base"), key); };
  const auto with = [&](const std::string& name, const std::string& key) {
    return max_over_steps(tmp.sub("offload_" + name), key);
  };
  // Generation holds the actor alone when the critic's and the reference's parameters wait in host memory, and no
  // optimizer state when it lives there.
  CHECK(with("param", "memory/gen_peak_mib") < base("memory/gen_peak_mib"));
  CHECK(with("param", "memory/host_state_mib") > base("memory/host_state_mib"));
  CHECK(with("optimizer", "memory/gen_peak_mib") < base("memory/gen_peak_mib"));
  CHECK(with("optimizer", "memory/host_state_mib") > base("memory/host_state_mib"));
  // Checkpointing keeps each block's input instead of its activations during the actor's backward pass.
  CHECK(with("checkpointing", "memory/update_actor_added_mib") < base("memory/update_actor_added_mib"));
  CHECK(with("all", "memory/gen_peak_mib") < base("memory/gen_peak_mib"));
}

TEST_CASE("ranks sharing one GPU: auto goes through MPI and 2 ranks equal 1 rank, nccl is refused at start-up",
          "[gpu][mpi]") {
  const int64_t gpus = torch::cuda::device_count();
  ppo_test::TempDir tmp;
  train_ok(0, tmp.sub("rank1"), kConfig);
  // Two ranks per GPU (on a machine of several GPUs, twice as many ranks as GPUs): auto stages collectives through
  // host memory.
  const int ranks = static_cast<int>(2 * gpus);
  train_ok(ranks, tmp.sub("shared"), kConfig);
  check_same(tmp.sub("rank1"), tmp.sub("shared"), kRankTolerance);
  Run refused = train(ranks, tmp.sub("nccl_shared"), kConfig + " parallel.backend=nccl");
  INFO(refused.output);
  CHECK(refused.status == 2);
  CHECK_THAT(refused.output, Catch::Contains("parallel.backend=nccl needs one GPU per rank, and " +
                                             std::to_string(ranks) + " ranks on this host share"));
  CHECK_THAT(refused.output, !Catch::Contains("parameters"));  // no model was built
}

TEST_CASE("NCCL: one rank per GPU equals 1 rank (needs 2 GPUs or more)", "[gpu][mpi]") {
  ppo_test::TempDir tmp;
  const int64_t gpus = torch::cuda::device_count();
  if (gpus < 2) {
    WARN("one GPU: NCCL cannot join two ranks on it (it refuses a duplicate GPU); nothing to compare");
    return;
  }
  train_ok(0, tmp.sub("nccl1"), kConfig);
  const int ranks = static_cast<int>(std::min<int64_t>(gpus, 4));
  train_ok(ranks, tmp.sub("nccl"), kConfig + " parallel.backend=nccl");
  check_same(tmp.sub("nccl1"), tmp.sub("nccl"), kRankTolerance);
}

TEST_CASE("ZeRO stage 3 on CUDA equals 1 rank: ranks sharing a GPU through MPI, and NCCL with 2 GPUs or more",
          "[gpu][mpi][zero]") {
  ppo_test::TempDir tmp;
  const int64_t gpus = torch::cuda::device_count();
  train_ok(0, tmp.sub("one"), kConfig);
  for (int stage : {1, 3}) {
    const std::string zero = " parallel.zero_stage=" + std::to_string(stage);
    train_ok(static_cast<int>(2 * gpus), tmp.sub("shared" + std::to_string(stage)), kConfig + zero);
    check_same(tmp.sub("one"), tmp.sub("shared" + std::to_string(stage)), kRankTolerance);
    if (gpus < 2) continue;
    const int ranks = static_cast<int>(std::min<int64_t>(gpus, 4));
    train_ok(ranks, tmp.sub("nccl" + std::to_string(stage)), kConfig + zero + " parallel.backend=nccl");
    check_same(tmp.sub("one"), tmp.sub("nccl" + std::to_string(stage)), kRankTolerance);
  }
}

// Rollout ranks on the device: 2 trainers and 1 rollout rank, the weights sent to it after every step. On fewer than 3
// GPUs the ranks share them (auto: MPI through host memory); on 3 or more each has its own (auto: NCCL).
TEST_CASE("rollout ranks on CUDA: 2 trainers and 1 rollout rank equal 1 rank, and one step off-policy lags one version",
          "[gpu][mpi][roles]") {
  ppo_test::TempDir tmp;
  ppo_test::check_roles_equal(tmp.sub("roles"), kConfig + " trainer.test_freq=3", {{3, 1}});
  WARN("weight sync to the rollout rank, step 2: " << metrics(tmp.sub("roles_3_1"))[1]["comm/weight_sync_sent_mib"]
                                                   << " MiB");
  train_ok(3, tmp.sub("off"), kConfig + " parallel.rollout_ranks=1 async.max_staleness=1");
  const auto off = metrics(tmp.sub("off"));
  REQUIRE(off.size() == 3);
  CHECK(off[0]["async/staleness"] == 0);  // the first batch comes from the initial weights
  CHECK(off[2]["async/staleness"] == 1);
}

TEST_CASE("bfloat16 autocast on CUDA: 3 PPO steps run and stay near the fp32 run", "[gpu][trainer]") {
  ppo_test::TempDir tmp;
  // fp32 parameters and optimizer state, bf16 matmuls in every forward (model.autocast_dtype). Sampled tokens can
  // differ from the fp32 run's, so the steps are compared by their scores' level only.
  train_ok(0, tmp.sub("fp32"), kConfig);
  train_ok(0, tmp.sub("bf16"), kConfig + " model.autocast_dtype=bfloat16");
  const auto a = metrics(tmp.sub("fp32")), b = metrics(tmp.sub("bf16"));
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    for (auto& [key, value] : b[i].items()) {
      INFO("step " << i + 1 << " " << key);
      CHECK(value.is_number());  // NaN and inf are written as null
    }
    const double fa = a[i]["critic/score/mean"].get<double>(), fb = b[i]["critic/score/mean"].get<double>();
    WARN("step " << i + 1 << " score: fp32 " << fa << ", bf16 autocast " << fb);
    CHECK(std::abs(fa - fb) <= 0.1);
  }
}
