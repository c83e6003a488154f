// Small string helpers shared across modules.
#pragma once

#include <string>
#include <vector>

namespace ppo {

inline bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ASCII whitespace: space, \t, \n, \v, \f, \r (a regex's \s).
inline bool is_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

// `s` without trailing whitespace.
inline std::string trim_right(const std::string& s) {
  size_t end = s.size();
  while (end > 0 && is_space(s[end - 1])) --end;
  return s.substr(0, end);
}

// `s` without leading or trailing whitespace.
inline std::string trim(const std::string& s) {
  size_t begin = 0;
  while (begin < s.size() && is_space(s[begin])) ++begin;
  return trim_right(s.substr(begin));
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

// The same over any range, each item written by `text`: join(sizes, ", ", [](int64_t n) { return std::to_string(n); }).
template <class Range, class Text>
std::string join(const Range& items, const std::string& separator, Text&& text) {
  std::string out;
  bool first = true;
  for (const auto& item : items) {
    out += (first ? "" : separator) + text(item);
    first = false;
  }
  return out;
}

}  // namespace ppo
