// YAML read strictly, for config files and `key=value` overrides: one document, no aliases, no key twice in a
// mapping, UTF-8 text without control characters. Every problem is a UsageError naming the file (or override) and,
// where there is one, the line.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

namespace ppo {

// A node as text: a scalar's own, anything else in YAML's flow style.
std::string yaml_text(const YAML::Node& node);

// YAML::Load(text) once the text is known to hold no alias; `origin` names the file or override in errors.
YAML::Node load_yaml(const std::string& text, const std::string& origin);

// The one document of the config file `path`, checked as above (null when the file holds none or only a null).
YAML::Node read_config_file(const std::string& path);

}  // namespace ppo
