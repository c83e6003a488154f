// Small string helpers shared across modules.
#pragma once

#include <string>
#include <vector>

namespace ppo {

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Whether `s` holds a control character (below 0x20, or DEL): such text must not name a metric or reach a console.
inline bool has_control_character(const std::string& s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) return true;
  return false;
}

// The items of `items` with `separator` between them: join({"a", "b"}, ", ") is "a, b".
inline std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

}  // namespace ppo
