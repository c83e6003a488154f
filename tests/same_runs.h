// Two runs of the real command compute the same thing: 3 PPO steps of the tiny config, compared metric by metric and
// parameter by parameter. Used by the N ranks == 1 rank tests (tests/parallel/test_mpi.cpp, tests/train/test_roles.cpp)
// and the CUDA == CPU tests (tests/parallel/test_gpu.cpp).
#pragma once

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/files.h"
#include "common/jsonl.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "tests/paths.h"

namespace ppo_test {

// Parameters after 3 AdamW steps: Adam divides by sqrt(v), so fp32 summation-order differences in near-zero
// gradients grow. How much depends on the sampled trajectory: measured up to 2.5e-5 relative on 4 ranks with the
// sorted-order sampler, up to 1.8e-4 with the vocabulary-order one used now (the same runs with the earlier sampler
// stay below 1e-4), so parameters are held to 3e-4 relative. For a weight whose gradient is ~0, m / sqrt(v) is itself
// ill-conditioned: its step is up to the learning rate (1e-3) whatever the gradient's size, so rounding moves such a
// weight by a fraction of the learning rate. Measured: 0 to 4 of the 80,384 weights outside the band, by up to
// 2.7e-5 absolute (LibTorch 2.11: padding on 4 ranks 1 weight, token budgets on 2 ranks 1 weight of 0.0048 by
// 5.8e-6; LibTorch 1.13: token budgets 3 and 4 weights by up to 2.1e-5). Allowed: kParamOutliers weights outside the
// band, each within kParamOutlierBound (a tenth of one step's largest move). A wrong update moves many weights, and
// the metrics, which are held to 1e-5.
constexpr double kParamTolerance = 3e-4;
constexpr int64_t kParamOutliers = 16;  // 2e-4 of the tiny model's weights
constexpr double kParamOutlierBound = 1e-4;

// Relative tolerance of the N-rank == 1-rank checks (fp32 sums in a different order: allreduce, micro-batches),
// with an absolute floor of 1e-6.
constexpr double kRankTolerance = 1e-5;

struct Run {
  int status;
  std::string output;
  double seconds;
};

// `command` through the shell; stdout and stderr together.
inline Run run(const std::string& command) {
  auto start = std::chrono::steady_clock::now();
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buffer[4096];
  while (pipe && fgets(buffer, sizeof(buffer), pipe)) output += buffer;
  int status = pipe ? pclose(pipe) : -1;
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output, seconds};
}

inline std::string mpirun(int ranks) {
  return ppo_test::paths().mpiexec + " --allow-run-as-root --oversubscribe --bind-to none -np " +
         std::to_string(ranks) + " ";
}

// 3 PPO steps of the tiny config on `ranks` ranks (0: no mpirun) into `dir`; `prefix` goes before the command (an
// environment setting such as CUDA_VISIBLE_DEVICES=).
// Eager attention: these tests compare N ranks with 1 rank to 1e-5, which needs every sampled token to agree. A
// rank's micro-batches hold other rows and other amounts of left padding than one rank's, and sdpa's blocked softmax
// rounds differently over extra padded keys (2e-7 here), which can flip a token sampled near a CDF boundary (seen at
// step 3 of the balance_batch test on LibTorch 2.11). sdpa == eager is tested in tests/model/test_transformer.cpp.
inline Run train(int ranks, const std::string& dir, const std::string& extra, const std::string& prefix = "") {
  ppo::remove_tree(dir);
  std::string cmd = prefix + (ranks > 0 ? mpirun(ranks) : std::string()) + ppo_test::paths().ppo_binary +
                    " train --config " + ppo_test::paths().source_dir +
                    "/configs/regression_tiny.yaml trainer.output_dir=" + dir +
                    " trainer.total_training_steps=3 trainer.test_freq=0 trainer.val_before_train=false"
                    " trainer.num_threads=1 model.attn_implementation=eager " +
                    extra;
  return run(cmd);
}

inline std::vector<nlohmann::json> metrics(const std::string& dir) {
  return ppo::read_jsonl(dir + "/metrics.jsonl");
}

// Timings and memory figures differ between runs by nature.
inline bool skip_key(const std::string& key) {
  return key.rfind("timing_s/", 0) == 0 || key.rfind("memory/", 0) == 0 || key.rfind("comm/", 0) == 0 ||
         key.rfind("perf/rank_token", 0) == 0 || key == "perf/throughput" || key == "perf/time_per_step" ||
         key == "perf/max_memory_allocated_gb";
}

// Every metric of every step and every final parameter agree: |x - y| <= rtol * max(|x|, |y|) + atol for metrics
// (the absolute floor covers quantities that are ~0 by construction, such as the mean of whitened advantages), and
// param_rtol and atol for parameters, but for up to param_outliers weights within kParamOutlierBound (see there).
inline void check_same(const std::string& a, const std::string& b, double rtol, double atol = 1e-6,
                       double param_rtol = kParamTolerance, int64_t param_outliers = kParamOutliers) {
  auto ma = metrics(a), mb = metrics(b);
  REQUIRE(ma.size() == 3);
  REQUIRE(mb.size() == ma.size());
  double worst = 0;
  std::string worst_key;
  for (size_t i = 0; i < ma.size(); ++i) {
    for (auto& [key, va] : ma[i].items()) {
      if (skip_key(key)) continue;
      INFO("step " << i + 1 << " " << key);
      REQUIRE(mb[i].contains(key));
      REQUIRE(va.is_number() == mb[i][key].is_number());
      if (!va.is_number()) continue;
      double x = va.get<double>(), y = mb[i][key].get<double>();
      double excess = std::abs(x - y) / (rtol * std::max(std::abs(x), std::abs(y)) + atol);
      if (excess > worst) worst = excess, worst_key = key;
      CHECK(excess <= 1.0);
    }
  }
  // The policy's trained tensors: the whole model, or a LoRA run's adapters.
  std::vector<torch::Tensor> xa, xb;
  const std::string adapters = "/checkpoints/global_step_3/actor_lora.safetensors";
  if (std::filesystem::exists(a + adapters)) {
    for (const auto& [name, t] : ppo::load_safetensors(a + adapters)) xa.push_back(t);
    for (const auto& [name, t] : ppo::load_safetensors(b + adapters)) xb.push_back(t);
  } else {
    // The model as run a wrote it (its resolved config: the shape of a model.path folder, the family's keys).
    ppo::Config c = ppo::load_config({a + "/config.yaml"}, {});
    const int64_t vocab = c.model.vocab_size > 0 ? c.model.vocab_size : 99;  // 99: the char tokenizer's
    ppo::CausalLM pa(c.model, vocab), pb(c.model, vocab);
    ppo::load_module(*pa, ppo::weights_file(a + "/checkpoints/global_step_3", "actor"));
    ppo::load_module(*pb, ppo::weights_file(b + "/checkpoints/global_step_3", "actor"));
    xa = pa->parameters(), xb = pb->parameters();
  }
  REQUIRE(xa.size() == xb.size());
  double param_excess = 0, outlier_diff = 0;
  int64_t outliers = 0;
  for (size_t i = 0; i < xa.size(); ++i) {
    torch::Tensor diff = (xa[i] - xb[i]).abs();
    torch::Tensor excess = diff / (param_rtol * torch::max(xa[i].abs(), xb[i].abs()) + atol);
    outliers += (excess > 1.0).sum().item<int64_t>();
    outlier_diff = std::max(outlier_diff, diff.max().item<double>());
    param_excess = std::max(param_excess, excess.max().item<double>());
  }
  WARN("largest difference / tolerance: metrics " << worst << " (" << worst_key << "), parameters " << param_excess
                                                  << " (" << outliers << " weights outside the band, largest "
                                                  << "difference " << outlier_diff << ")");
  CHECK(outliers <= param_outliers);
  CHECK(outlier_diff <= kParamOutlierBound);
}

// Runs `ppo train` again into `dir` (regression_tiny.yaml and train()'s settings, then `extra`), which resumes
// from its latest checkpoint.
inline Run resume(int ranks, const std::string& dir, const std::string& extra) {
  return run(mpirun(ranks) + paths().ppo_binary + " train --config " + paths().source_dir +
             "/configs/regression_tiny.yaml trainer.output_dir=" + dir +
             " trainer.test_freq=0 trainer.val_before_train=false trainer.num_threads=1 " +
             "model.attn_implementation=eager " + extra);
}

// Steps `from`..`to` (1-based) of runs a and b have the same value of every metric but timings; both have `to` steps.
inline void check_steps_equal(const std::string& a, const std::string& b, size_t from, size_t to) {
  const auto ma = metrics(a), mb = metrics(b);
  REQUIRE(ma.size() == to);
  REQUIRE(mb.size() == to);
  int compared = 0;
  for (size_t i = from - 1; i < to; ++i)
    for (const auto& [key, value] : ma[i].items()) {
      if (skip_key(key)) continue;
      INFO("step " << i + 1 << " " << key);
      REQUIRE(mb[i].contains(key));
      CHECK(value == mb[i][key]);
      ++compared;
    }
  CHECK(compared > 20 * static_cast<int>(to - from + 1));
}

// `full` holds 4 steps of `cfg` (which sets trainer.total_training_steps=4) on `ranks` ranks. The same run into
// `split`, checkpointing every 2 steps, "crashed" after step 4's checkpoint was lost and resumed from step 2: its
// steps 3 and 4 equal the full run's, every metric but timings.
inline void check_resume_equal(int ranks, const std::string& full, const std::string& split, const std::string& cfg) {
  REQUIRE(train(ranks, split, cfg + " trainer.save_freq=2 trainer.max_ckpt_to_keep=0").status == 0);
  ppo::remove_tree(split + "/checkpoints/global_step_4");
  std::ofstream(split + "/checkpoints/latest_checkpointed_iteration.txt") << 2 << "\n";
  Run resumed = resume(ranks, split, "trainer.save_freq=2 " + cfg);
  INFO(resumed.output);
  REQUIRE(resumed.status == 0);
  CHECK_THAT(resumed.output, Catch::Contains("resumed from"));
  check_steps_equal(full, split, 3, 4);
}

// Rollout ranks (parallel.rollout_ranks) compute what 1 rank does: 3 steps of `cfg` on 1 rank into base + "_1", then
// for each (ranks, rollout ranks) of `layouts` into base + "_<ranks>_<rollout>", each the same as the first. With
// rollout ranks, step 2's batch comes from the current weights, sent to them, and step 3 validates on them (`cfg` sets
// trainer.test_freq=3).
inline void check_roles_equal(const std::string& base, const std::string& cfg,
                              const std::vector<std::pair<int, int>>& layouts) {
  const std::string one = base + "_1";
  REQUIRE(train(0, one, cfg).status == 0);
  for (const auto& [ranks, rollout] : layouts) {
    const std::string dir = base + "_" + std::to_string(ranks) + "_" + std::to_string(rollout);
    Run r = train(ranks, dir, cfg + " parallel.rollout_ranks=" + std::to_string(rollout));
    INFO(ranks << " ranks, " << rollout << " rollout\n" << r.output);
    REQUIRE(r.status == 0);
    check_same(one, dir, kRankTolerance);
    if (rollout > 0) {
      const auto lines = metrics(dir);
      CHECK(lines[2].contains("val/reverse/score/mean"));  // validated on the rollout ranks
      CHECK(lines[1]["async/staleness"] == 0);
      CHECK(lines[1]["comm/weight_sync_sent_mib"].get<double>() > 0);
    }
  }
}

}  // namespace ppo_test
