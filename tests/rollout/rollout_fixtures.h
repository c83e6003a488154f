// What the rollout tests share: a tiny policy that stops often, its prompts, seeds and generation parameters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rollout/rollout.h"
#include "tests/model/small_model.h"

namespace ppo_test {

// A tiny policy with V = 8 so that EOS (id 2) is sampled often and rows stop at different lengths.
// On `device`: generation follows the model's device.
// `family`: with_family's oddities ("qwen3", "mistral").
inline ppo::CausalLM tiny_policy(const torch::Device& device = torch::kCPU, const std::string& family = "") {
  ppo::ModelConfig c = with_family(small_model_config(/*num_layers=*/2, /*intermediate_size=*/48, /*seed=*/11), family);
  c.init_std = 0.3;  // a peaked, position-dependent distribution
  ppo::CausalLM model(c, 8);
  model->to(device);
  return model;
}

inline const std::vector<std::vector<int64_t>> kPrompts = {
    {1, 3, 4, 5}, {1, 7}, {1, 6, 6, 6, 6, 3}, {1, 5, 4}, {1, 3}, {1, 4, 4, 7, 7}, {1}, {1, 7, 6, 5, 4, 3, 7}};

inline std::vector<uint64_t> seeds_for(size_t n, uint64_t base) {
  std::vector<uint64_t> seeds;
  for (size_t i = 0; i < n; ++i) seeds.push_back(ppo::sample_seed(base, /*step=*/0, static_cast<int64_t>(i), 0));
  return seeds;
}

inline ppo::GenerationParams params(double temperature) {
  ppo::GenerationParams p;
  p.max_new_tokens = 12;
  p.temperature = temperature;
  p.pad_id = 0;
  p.eos_id = 2;
  p.micro_batch_size = 3;
  return p;
}

}  // namespace ppo_test
