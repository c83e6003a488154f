// libFuzzer target for PEFT adapter folders (model.lora_path; model/lora.cpp load_peft_adapter): the input is the
// folder's adapter_config.json, beside a fixed adapter_model.safetensors holding the rank-4 adapters of every linear
// layer of a tiny model. Reading must succeed or throw ppo::UsageError; and it may succeed only for a config that
// says what the model's adapters are (r 4, lora_alpha 8, no rsLoRA, every layer targeted, nothing PEFT would compute
// differently), after which every adapter holds the file's tensor. Any other exception, crash, sanitizer report or
// failed check is a bug. Built and run by scripts/fuzz.sh (`bash scripts/fuzz.sh build 30 lora_config`); inputs that
// start with 0xFE are deep-nesting recipes (tests/fuzz/fuzz_support.h).
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "model/lora.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

[[noreturn]] void finding(const std::string& what) {
  ppo_fuzz::finding("fuzz_lora_config", what);
}

struct Fixture {
  ppo_fuzz::ProcessFolder folder{"fuzz_lora_config"};
  std::string dir = folder.path;
  ppo::LoraConfig lora;
  ppo::CausalLM model{nullptr};
  std::map<std::string, torch::Tensor> adapters;  // PEFT's names -> the file's tensors

  Fixture() {
    ppo::ModelConfig config;
    config.hidden_size = 16, config.num_layers = 1, config.num_heads = 2, config.num_kv_heads = 1;
    config.intermediate_size = 24;
    lora.rank = 4;
    lora.alpha = 8;
    model = ppo::CausalLM(config, 20);
    ppo::add_lora(*model->model, lora, "actor.lora", /*seed=*/3);
    torch::NoGradGuard no_grad;
    for (auto& item : model->named_parameters())
      if (ppo::is_lora_parameter(item.key())) item.value().uniform_(-1, 1);
    adapters = ppo::peft_adapter_tensors(*model);
    ppo::save_safetensors(dir + "/adapter_model.safetensors", adapters);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fixture;
  std::ofstream(fixture.dir + "/adapter_config.json", std::ios::binary | std::ios::trunc)
      << ppo_fuzz::expand_deep(data, size);
  {
    torch::NoGradGuard no_grad;
    for (auto& item : fixture.model->named_parameters())
      if (ppo::is_lora_parameter(item.key())) item.value().zero_();
  }
  try {
    ppo::load_peft_adapter(*fixture.model, fixture.lora, fixture.dir);
  } catch (const ppo::UsageError&) {
    return 0;
  }
  // Read: the adapters are the file's, and the config said what they are.
  const auto read = ppo::peft_adapter_tensors(*fixture.model);
  for (const auto& [name, tensor] : fixture.adapters)
    if (!read.count(name) || !torch::equal(read.at(name), tensor)) finding("adapter " + name + " is not the file's");
  const nlohmann::json config = ppo::parse_json_bounded(ppo_fuzz::expand_deep(data, size));  // it read: it parses
  const auto is = [&](const char* key, const nlohmann::json& value) {
    return config.contains(key) && config[key] == value;
  };
  if (!is("r", 4) || !is("lora_alpha", 8) || is("use_rslora", true) || is("use_dora", true) ||
      is("fan_in_fan_out", true))
    finding("accepted a config of other settings: " + config.dump().substr(0, 300));
  return 0;
}
