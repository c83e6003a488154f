// JSON from untrusted files, parsed with a bound on nesting: copying, comparing and printing a JSON value recurse once
// per level, so a record nested 100,000 deep would overflow the stack far from where it was read.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "common/error.h"

namespace ppo {

// The limit for data records, checkpoint files and the like: real ones nest a handful of levels.
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

}  // namespace ppo
