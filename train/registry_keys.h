// The config keys whose values are names kept by a registry above common/ (their schema rows' range is `registry()`),
// each written once, here: its key, its registry's names (with one line of help where the registry keeps one) and the
// check of its value against them. check_config runs every check, and `--help` and `ppo config --comments` list the
// names (registry_choices); a test holds this table and the schema to the same keys.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/config_schema.h"

namespace ppo {

struct RegistryKey {
  std::string key;                                // e.g. "algorithm.adv_estimator"
  std::function<std::vector<KeyChoice>()> names;  // the registry's names, in its order
  std::function<void(const Config&)> check;       // UsageError naming the key, the value and the valid names
};
const std::vector<RegistryKey>& registry_keys();

// Every registry key's names, for config_help and config_to_yaml.
KeyChoices registry_choices();

// Runs every registry key's check.
void check_registry_names(const Config& config);

}  // namespace ppo
