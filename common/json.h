// JSON from outside ppo.cpp, read through one parser with a bound on nesting: copying, comparing and printing a JSON
// value recurse once per level, so a document nested 100,000 deep would overflow the stack far from where it was
// read. Every JSON file and line ppo.cpp reads (data records, model and tokenizer files, checkpoints, reward
// programs' answers) goes through these.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "common/error.h"
#include "common/files.h"

namespace ppo {

// Real files nest a handful of levels (tokenizer.json: 5, config.json: 3, a veRL record: 4).
constexpr int kMaxJsonDepth = 100;

// nlohmann::json::parse(text), but a document nested deeper than `max_depth` is a UsageError. Invalid JSON throws
// nlohmann's parse_error, as parse does. Linear in the text: the depth is counted in one pass before the parse
// (nlohmann's parse with a callback rescans a container each time a value in it closes: quadratic).
nlohmann::json parse_json_bounded(const std::string& text, int max_depth = kMaxJsonDepth);

// The same without exceptions: nullopt for invalid JSON or a document nested too deep.
inline std::optional<nlohmann::json> try_parse_json_bounded(const std::string& text, int max_depth = kMaxJsonDepth) {
  try {
    return parse_json_bounded(text, max_depth);
  } catch (const nlohmann::json::exception&) {
  } catch (const UsageError&) {
  }
  return std::nullopt;
}

// The JSON document of the regular file `path`; unreadable, invalid or nested too deep is a UsageError naming it.
nlohmann::json read_json_file(const std::string& path);

}  // namespace ppo
