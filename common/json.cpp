// See common/json.h.
#include "common/json.h"

namespace ppo {
namespace {

// Throws when `text` opens a container inside `max_depth` others (strings skipped, escapes included); the parse
// that follows finds any other fault.
void check_json_depth(const std::string& text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (depth > max_depth)
        throw UsageError("JSON nested deeper than " + std::to_string(max_depth) + " levels (the limit)");
      ++depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

}  // namespace

nlohmann::json parse_json_bounded(const std::string& text, int max_depth) {
  check_json_depth(text, max_depth);
  return nlohmann::json::parse(text);
}

nlohmann::json read_json_file(const std::string& path) {
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
