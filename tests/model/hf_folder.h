// A Hugging Face folder of a tiny seeded Qwen2-shaped model over the built-in character tokenizer, for the tests that
// need a model.path: width 32, 2 layers, 4 query and 2 key/value heads, SwiGLU 64, 99 tokens.
#pragma once

#include <functional>
#include <string>

#include "common/config.h"
#include "model/hf.h"
#include "model/tokenizer.h"
#include "model/transformer.h"

namespace ppo_test {

// Writes the folder `dir`; `seed` picks the weights, `poison` may change them first.
inline void write_hf_model(const std::string& dir, const std::function<void(ppo::CausalLM&)>& poison = nullptr,
                           int64_t seed = 0) {
  ppo::ModelConfig config;
  config.hidden_size = 32, config.num_layers = 2, config.num_heads = 4, config.num_kv_heads = 2;
  config.intermediate_size = 64;
  config.seed = seed;
  ppo::CausalLM model(config, 99);
  if (poison) poison(model);
  ppo::export_hf(model, config, dir, *ppo::make_tokenizer("char"), "char");
}

}  // namespace ppo_test
