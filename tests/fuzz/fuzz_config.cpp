// libFuzzer target for the config loader (common/config.cpp): the input is a YAML config file, optionally followed by
// a line "@@" and one `key.path=value` override per line. Loading must either succeed or throw ppo::UsageError; a
// loaded config printed by config_to_yaml must load again and print the same text. Any other exception, crash,
// sanitizer report or failed check is a bug. Built and run by scripts/fuzz.sh (`bash scripts/fuzz.sh build 30 config`).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

// Splits the input at its first line "@@": the YAML before it, one override per line after it.
void split_input(const std::string& input, std::string& yaml, std::vector<std::string>& overrides) {
  size_t marker = input.rfind("@@\n", 0) == 0 ? 0 : input.find("\n@@\n");
  if (marker == std::string::npos) {
    yaml = input;
    return;
  }
  yaml = input.substr(0, marker);
  size_t begin = input.find('\n', marker + 1) + 1;
  while (begin <= input.size()) {
    size_t end = input.find('\n', begin);
    if (end == std::string::npos) end = input.size();
    if (end > begin) overrides.push_back(input.substr(begin, end - begin));
    begin = end + 1;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string yaml;
  std::vector<std::string> overrides;
  split_input(std::string(reinterpret_cast<const char*>(data), size), yaml, overrides);
  ppo::Config config;
  try {
    config = ppo::load_config({ppo_fuzz::file_with(0, yaml)}, overrides);
  } catch (const ppo::UsageError&) {
    return 0;
  }
  // Round trip (the resolved config is written into the run directory and read back on resume): no catch, so an
  // exception here is reported.
  const std::string printed = ppo::config_to_yaml(config);
  ppo::Config reloaded = ppo::load_config({ppo_fuzz::file_with(1, printed)}, {});
  const std::string reprinted = ppo::config_to_yaml(reloaded);
  if (reprinted != printed)
    ppo_fuzz::finding("fuzz_config", "config_to_yaml -> load_config -> config_to_yaml changed the config:\n" + printed +
                                         "---\n" + reprinted);
  return 0;
}
