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
// nlohmann's parse_error, as parse does.
inline nlohmann::json parse_json_bounded(const std::string& text, int max_depth = kMaxJsonDepth) {
  return nlohmann::json::parse(text, [max_depth](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > max_depth)
      throw UsageError("JSON nested deeper than " + std::to_string(max_depth) + " levels (the limit)");
    return true;
  });
}

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
inline nlohmann::json read_json_file(const std::string& path) {
  const std::string text = read_regular_file(path);
  try {
    return parse_json_bounded(text);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(path + ": invalid JSON: " + e.what());
  } catch (const UsageError& e) {
    throw UsageError(path + ": " + e.what());
  }
}

}  // namespace ppo
