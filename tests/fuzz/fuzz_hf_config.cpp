// libFuzzer target for a Hugging Face model folder's config.json (model/hf.cpp read_hf_config): the input is the
// file's text, or a recipe for one nested past libFuzzer's input length (tests/fuzz/fuzz_support.h expand_deep).
// Reading must either give a model shape that passes validate_model_config or throw ppo::UsageError; a shape read is
// also sized (model_parameters: finite, positive). Any other exception, crash, sanitizer report or failed check is a
// bug. Built and run by scripts/fuzz.sh (`bash scripts/fuzz.sh build 30 hf_config`).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.h"
#include "common/files.h"
#include "model/hf.h"
#include "model/model_shape.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ppo_fuzz::ProcessFolder folder("fuzz_hf_config");
  const std::string text = ppo_fuzz::expand_deep(data, size);
  {
    std::FILE* f = std::fopen((folder.path + "/config.json").c_str(), "wb");
    if (!f || std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fclose(f) != 0)
      ppo_fuzz::finding("fuzz_hf_config", "cannot write config.json");
  }
  ppo::HfModelInfo info;
  try {
    info = ppo::read_hf_config(folder.path, ppo::ModelConfig{});
  } catch (const ppo::UsageError&) {
    return 0;
  }
  const double parameters = ppo::model_parameters(info.config, info.config.vocab_size);
  if (!std::isfinite(parameters) || parameters <= 0)
    ppo_fuzz::finding("fuzz_hf_config", "a config that reads has " + std::to_string(parameters) + " parameters");
  return 0;
}
