// A Hugging Face folder of a tiny seeded Qwen2-shaped model over the built-in character tokenizer, for the tests that
// need a model.path: width 32, 2 layers, 4 query and 2 key/value heads, SwiGLU 64, 99 tokens; and the same shape as a
// reward model over the tiny byte-level tokenizer.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>

#include "common/config.h"
#include "common/files.h"
#include "model/hf.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "tests/model/tiny_tokenizer.h"
#include "text/tokenizers.h"

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

// A LlamaForSequenceClassification folder with one label: the shape above over tiny_tokenizer_json() with
// <|im_end|> (id 302) added as its EOS (303 tokens; pad_token_id 0), its score head [1, 32] seeded by `seed`;
// `chat_template`, when given, goes into tokenizer_config.json.
inline void write_reward_model(const std::string& dir, int64_t seed = 1, const std::string& chat_template = "") {
  const std::string tokenizer_dir = dir + ".tokenizer";
  std::filesystem::create_directories(tokenizer_dir);
  nlohmann::json tokenizer_json = tiny_tokenizer_json();
  tokenizer_json["added_tokens"].push_back({{"id", 302}, {"content", "<|im_end|>"}, {"special", true}});
  std::ofstream(tokenizer_dir + "/tokenizer.json") << tokenizer_json.dump();
  nlohmann::json tokenizer_config = {{"eos_token", "<|im_end|>"}};
  if (!chat_template.empty()) tokenizer_config["chat_template"] = chat_template;
  std::ofstream(tokenizer_dir + "/tokenizer_config.json") << tokenizer_config.dump();
  ppo::ModelConfig config;
  config.hidden_size = 32, config.num_layers = 2, config.num_heads = 4, config.num_kv_heads = 2;
  config.intermediate_size = 64;
  config.seed = seed;
  const auto tokenizer = ppo::make_tokenizer(tokenizer_dir);
  ppo::CausalLM model(config, 303);
  ppo::export_hf(model, config, dir, *tokenizer, tokenizer_dir);
  ppo::remove_tree(tokenizer_dir);
  nlohmann::json hf;
  std::ifstream(dir + "/config.json") >> hf;
  hf["architectures"] = {"LlamaForSequenceClassification"};
  hf["id2label"] = {{"0", "LABEL_0"}};
  hf["label2id"] = {{"LABEL_0", 0}};
  hf["pad_token_id"] = 0;
  std::ofstream(dir + "/config.json") << hf.dump(2);
  std::map<std::string, torch::Tensor> tensors = ppo::load_safetensors(dir + "/model.safetensors");
  tensors.erase("lm_head.weight");
  torch::manual_seed(static_cast<uint64_t>(seed));
  tensors["score.weight"] = torch::randn({1, 32});
  ppo::save_safetensors(dir + "/model.safetensors", tensors, nlohmann::json{{"format", "pt"}});
}

}  // namespace ppo_test
