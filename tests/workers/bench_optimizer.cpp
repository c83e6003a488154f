// One Optimizer::step of the memory benchmark's model (configs/bench_memory.yaml: 8 layers, width 256, 5.83M
// parameters) on the CPU, with the fused AdamW and with the per-tensor one. Hidden ([.bench]): run it by name, from
// the build folder of a LibTorch >= 2.4 build:
//   ./ppo_tests "[.bench]"
#include <torch/version.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>

#include "common/config.h"
#include "model/transformer.h"
#include "parallel/context.h"
#include "tests/paths.h"
#include "workers/optimizer.h"

namespace {

// A copy of the model's parameters, for an optimizer of its own.
std::vector<torch::Tensor> copy_params(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> copy;
  for (const auto& p : params) copy.push_back(p.detach().clone().requires_grad_());
  return copy;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

TEST_CASE("bench: one Optimizer::step of the 8-layer bench model, fused AdamW and per tensor", "[.bench]") {
  const ppo::Config c = ppo::load_config({ppo_test::paths().source_dir + "/configs/bench_memory.yaml"}, {});
  ppo::CausalLM model(c.model, /*vocab_size=*/99);  // the char tokenizer's
  torch::set_num_threads(2);
  const int repeats = 20;
  torch::manual_seed(1);
  std::vector<torch::Tensor> grads;
  for (const auto& p : model->parameters()) grads.push_back(torch::randn_like(p) * 1e-3);  // norm ~2.4: clipped

  std::vector<torch::Tensor> params_fused = copy_params(model->parameters());
  std::vector<torch::Tensor> params_per_tensor = copy_params(model->parameters());
  ppo::Optimizer fused(params_fused, c.actor.optim, c.actor.grad_clip, /*total_steps=*/1000);
  ppo::Optimizer per_tensor(params_per_tensor, c.actor.optim, c.actor.grad_clip, /*total_steps=*/1000);
  per_tensor.set_fused(false);
  // One timed step: fresh gradients first (not timed); returns milliseconds.
  auto timed_step = [&](ppo::Optimizer& optimizer, std::vector<torch::Tensor>& params, bool expect_fused) {
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = grads[i].clone();
    const auto start = std::chrono::steady_clock::now();
    const ppo::StepResult r = optimizer.step(ppo::Context::get());
    const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
    CHECK(r.fused == expect_fused);
    return elapsed.count();
  };
  // The first step of each creates the moments: not counted. Then the two alternate, so that both see the same load.
  std::vector<double> ms_fused, ms_per_tensor;
  for (int r = 0; r <= repeats; ++r) {
    const double f = timed_step(fused, params_fused, ppo::fused_adamw_available());
    const double p = timed_step(per_tensor, params_per_tensor, /*expect_fused=*/false);
    if (r == 0) continue;
    ms_fused.push_back(f);
    ms_per_tensor.push_back(p);
  }
  WARN("LibTorch " << TORCH_VERSION << ", " << torch::get_num_threads() << " threads, " << ppo::parameter_count(*model)
                   << " parameters in " << params_fused.size() << " tensors: one Optimizer::step, median of " << repeats
                   << ": " << (ppo::fused_adamw_available() ? "fused " : "fused (absent: per tensor) ")
                   << median(ms_fused) << " ms (min " << *std::min_element(ms_fused.begin(), ms_fused.end())
                   << "), per tensor " << median(ms_per_tensor) << " ms (min "
                   << *std::min_element(ms_per_tensor.begin(), ms_per_tensor.end()) << ")");
}
