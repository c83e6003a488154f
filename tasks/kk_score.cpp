// The Logic-RL reward of a Knights and Knaves answer (kk_score) and the reading of solution lines, matched by hand
// in linear time (see kk.h for the sources).
#include "tasks/kk.h"

#include <cstring>
#include <optional>

#include "common/strings.h"
#include "tasks/kk_internal.h"

namespace ppo {

// ---------------------------------------------------------------------------------------------------------------
// Logic-RL reward.

namespace {

size_t count_substr(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + needle.size())) {
    ++count;
  }
  return count;
}

// validate_response_structure: each tag exactly once, and first occurrences in order.
bool valid_structure(const std::string& text) {
  const std::vector<std::string> tags = {"<think>", "</think>", "<answer>", "</answer>"};
  bool ok = true;
  std::vector<std::ptrdiff_t> positions;
  for (const std::string& tag : tags) {
    ok = ok && count_substr(text, tag) == 1;
    const size_t pos = text.find(tag);
    positions.push_back(pos == std::string::npos ? -1 : static_cast<std::ptrdiff_t>(pos));
  }
  return ok && positions[0] <= positions[1] && positions[1] <= positions[2] && positions[2] <= positions[3];
}

// extract_solution: the last non-overlapping <answer>(.*?)</answer>, stripped; nullopt when there is none.
std::optional<std::string> last_answer_block(const std::string& text) {
  const std::string open = "<answer>", close = "</answer>";
  std::optional<std::string> last;
  size_t pos = text.find(open);
  while (pos != std::string::npos) {
    const size_t end = text.find(close, pos + open.size());
    if (end == std::string::npos) break;
    last = trim(text.substr(pos + open.size(), end - pos - open.size()));
    pos = text.find(open, end + close.size());
  }
  return last;
}

// Logic-RL matches answers with Python regexes. They are matched by hand here, in linear time: std::regex recurses
// per character and overflows the stack on long inputs. Classes as std::regex has them in the "C" locale.

bool is_word_char(char c) {  // \w
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

char ascii_lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

std::string to_lower(std::string s) {
  for (char& c : s) c = ascii_lower(c);
  return s;
}

// \b at pos: a word character on exactly one side (the ends of the text count as non-word).
bool word_boundary(const std::string& s, size_t pos) {
  const bool before = pos > 0 && is_word_char(s[pos - 1]);
  const bool after = pos < s.size() && is_word_char(s[pos]);
  return before != after;
}

}  // namespace

// End of the run of \s starting at pos (pos when there is none).
size_t kk_skip_spaces(const std::string& s, size_t pos) {
  while (pos < s.size() && is_space(s[pos])) ++pos;
  return pos;
}

namespace {

// Whether s continues at pos with `lower_word`, ignoring ASCII case.
bool continues_with(const std::string& s, size_t pos, const char* lower_word) {
  for (; *lower_word; ++lower_word, ++pos)
    if (pos >= s.size() || ascii_lower(s[pos]) != *lower_word) return false;
  return true;
}

struct RoleClaim {
  bool knight = false;
  size_t end = 0;  // just past "knight" / "knave"
};

// \s+is\s+a\s+(knight|knave) at pos, ignoring case. Each \s+ takes the whole run: a letter must follow it.
std::optional<RoleClaim> role_claim(const std::string& s, size_t pos) {
  for (const char* word : {"is", "a"}) {
    const size_t start = kk_skip_spaces(s, pos);
    if (start == pos || !continues_with(s, start, word)) return std::nullopt;
    pos = start + std::strlen(word);
  }
  const size_t start = kk_skip_spaces(s, pos);
  if (start == pos) return std::nullopt;
  if (continues_with(s, start, "knight")) return RoleClaim{true, start + 6};
  if (continues_with(s, start, "knave")) return RoleClaim{false, start + 5};
  return std::nullopt;
}

// Calls visit(p) for each position p where `needle` occurs in `text`, left to right, until visit returns true.
// Knuth-Morris-Pratt, linear in text.size() + needle.size(); an empty needle occurs at every position.
template <typename Visit>
void for_each_occurrence(const std::string& text, const std::string& needle, Visit visit) {
  const size_t m = needle.size();
  if (m == 0) {
    for (size_t p = 0; p <= text.size(); ++p)
      if (visit(p)) return;
    return;
  }
  std::vector<size_t> border(m, 0);  // border[i]: longest proper prefix of needle[0..i] that also ends it
  for (size_t i = 1, k = 0; i < m; ++i) {
    while (k > 0 && needle[i] != needle[k]) k = border[k - 1];
    if (needle[i] == needle[k]) ++k;
    border[i] = k;
  }
  for (size_t i = 0, k = 0; i < text.size(); ++i) {
    while (k > 0 && text[i] != needle[k]) k = border[k - 1];
    if (text[i] == needle[k]) ++k;
    if (k == m) {
      if (visit(i + 1 - m)) return;
      k = border[m - 1];
    }
  }
}

// Logic-RL's \bNAME\b\s+is\s+a\s+\b(knight|knave)\b (NAME escaped, case-insensitive): the role (true = knight) of
// the first match in `text`, or nullopt. A candidate's whitespace run follows a word character that ends NAME, so
// each run is scanned by at most three candidates.
std::optional<bool> claimed_role(const std::string& text, const std::string& lower_text, const std::string& name) {
  std::optional<bool> role;
  for_each_occurrence(lower_text, to_lower(name), [&](size_t p) {
    const size_t name_end = p + name.size();
    if (!word_boundary(text, p) || !word_boundary(text, name_end)) return false;
    const std::optional<RoleClaim> claim = role_claim(text, name_end);
    if (!claim || !word_boundary(text, claim->end)) return false;
    role = claim->knight;
    return true;
  });
  return role;
}

// parse_model_answer: roles per name (true = knight), or nullopt when the knight/knave count != n or a name has no
// "<name> is a knight|knave".
std::optional<std::vector<bool>> parse_roles(const std::string& answer, const std::vector<std::string>& names) {
  const std::string lower = to_lower(answer);
  if (count_substr(lower, "knight") + count_substr(lower, "knave") != names.size()) return std::nullopt;
  std::vector<bool> roles;
  for (const std::string& name : names) {
    const std::optional<bool> role = claimed_role(answer, lower, name);
    if (!role) return std::nullopt;
    roles.push_back(*role);
  }
  return roles;
}

}  // namespace

KkScore kk_score(const std::string& response, const std::vector<std::string>& names, const std::vector<bool>& solution,
                 bool prompt_opens_think) {
  usage_check(names.size() == solution.size(), "kk_score: names and solution differ in length");
  // Logic-RL scores the text after "Assistant:", which holds the prompt's opening "<think>".
  const std::string processed = (prompt_opens_think ? "<think>" : "") + response;
  KkScore result;
  const bool format_ok = valid_structure(processed);
  result.format_score = format_ok ? 1.0 : -1.0;
  const std::optional<std::string> answer = last_answer_block(processed);
  if (!format_ok) {
    result.answer_score = -2.0;
    result.status = "bad_format";
  } else if (!answer || answer->empty()) {
    result.answer_score = -2.0;
    result.status = "empty_answer";
  } else if (const auto roles = parse_roles(*answer, names); !roles) {
    result.answer_score = -2.0;
    result.status = "unparseable";
  } else if (*roles == solution) {
    result.answer_score = 2.0;
    result.correct = true;
    result.status = "correct";
  } else {
    result.answer_score = -1.5;
    result.status = "wrong_answer";
  }
  result.total = result.format_score + result.answer_score;
  return result;
}

// Logic-RL's parse_solution_text_format: every "\(\d+\)\s+(\w+)\s+is\s+a\s+(knight|knave)" (case-insensitive), left to
// right. Each candidate starts at a '(' and scans no other '(', so the text is scanned once.
void kk_parse_solution_lines(const std::string& text, std::vector<std::string>& names, std::vector<bool>& solution) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '(') continue;
    size_t close = i + 1;
    while (close < text.size() && text[close] >= '0' && text[close] <= '9') ++close;
    if (close == i + 1 || close == text.size() || text[close] != ')') continue;
    const size_t name_begin = kk_skip_spaces(text, close + 1);
    size_t name_end = name_begin;
    while (name_end < text.size() && is_word_char(text[name_end])) ++name_end;
    if (name_begin == close + 1 || name_end == name_begin) continue;
    const std::optional<RoleClaim> claim = role_claim(text, name_end);
    if (!claim) continue;
    names.push_back(text.substr(name_begin, name_end - name_begin));
    solution.push_back(claim->knight);
    i = claim->end - 1;
  }
}

}  // namespace ppo
