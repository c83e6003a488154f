// What the model, rollout, memory and Hugging Face tests share: a small model shape and parameter-state checks.
#pragma once

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <string>

#include "common/config.h"

namespace ppo_test {

// Width 32 with 4 query and 2 key/value heads (grouped-query attention); depth, MLP width and seed per test.
inline ppo::ModelConfig small_model_config(int64_t num_layers, int64_t intermediate_size, int64_t seed) {
  ppo::ModelConfig c;
  c.hidden_size = 32;
  c.num_layers = num_layers;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.intermediate_size = intermediate_size;
  c.seed = seed;
  return c;
}

// The small shape with a family's oddities: "qwen3" (q/k norms, heads twice hidden_size / num_heads wide, yarn
// rotary scaling over an original context of 8 positions), "mistral" (heads twice as wide, a sliding window of 4
// tokens, llama3 rotary scaling over 32 positions), "qwen3_moe" (q/k norms, 8 experts 24 wide, top-2 unnormalised,
// layer 1 dense), "mixtral" (4 experts as wide as the MLP, top-2 renormalised, in every layer); "" leaves it as it is.
inline ppo::ModelConfig with_family(ppo::ModelConfig c, const std::string& family) {
  if (family.empty()) return c;
  c.model_type = family;
  if (family == "qwen3_moe" || family == "mixtral") {
    c.moe.num_experts = family == "mixtral" ? 4 : 8;
    c.moe.num_experts_per_tok = 2;
    c.moe.intermediate_size = family == "mixtral" ? 0 : 24;
    c.moe.norm_topk_prob = family == "mixtral";
    if (family == "qwen3_moe") c.moe.mlp_only_layers = {1};
    c.qk_norm = family == "qwen3_moe";
    return c;
  }
  c.head_dim = 2 * c.hidden_size / c.num_heads;
  if (family == "qwen3") {
    c.qk_norm = true;
    c.rope_scaling.rope_type = "yarn";
    c.rope_scaling.factor = 4;
    c.rope_scaling.original_max_position_embeddings = 8;
  } else {
    REQUIRE(family == "mistral");
    c.sliding_window = 4;
    c.rope_scaling.rope_type = "llama3";
    c.rope_scaling.factor = 8;
    c.rope_scaling.original_max_position_embeddings = 32;
  }
  return c;
}

// A copy of every parameter of `module`, by name.
inline std::map<std::string, torch::Tensor> state_of(const torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> state;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) state[item.key()] = item.value().detach().clone();
  return state;
}

// Every tensor of `expected` is in `actual` with the same dtype, shape and values; returns how many were compared.
inline size_t require_equal_states(const std::map<std::string, torch::Tensor>& expected,
                                   const std::map<std::string, torch::Tensor>& actual) {
  REQUIRE(actual.size() == expected.size());
  for (const auto& [name, e] : expected) {
    INFO("tensor " << name);
    REQUIRE(actual.count(name) == 1);
    REQUIRE(actual.at(name).scalar_type() == e.scalar_type());
    REQUIRE(torch::equal(actual.at(name), e));
  }
  return expected.size();
}

}  // namespace ppo_test
