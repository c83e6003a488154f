// Math final-answer extraction, normalisation and scoring (see math_answer.h for the sources and the lenient rules).
#include "tasks/math_answer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace ppo {

namespace {

// veRL gsm8k.py: _SOLUTION_CLIP_CHARS = 300, "a safe approximation for 300 tokens".
constexpr size_t kGsm8kClipChars = 300;
// Longer normalised answers are not taken for numbers or "a/b" fractions; this also keeps libstdc++'s std::regex,
// which recurses once per matched character, off long texts (a 300000-digit \boxed{} overflowed the stack).
constexpr size_t kMaxNumberChars = 100;

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t at = s.find(sep); at != std::string::npos; at = s.find(sep, start)) {
    parts.push_back(s.substr(start, at - start));
    start = at + sep.size();
  }
  parts.push_back(s.substr(start));
  return parts;
}

// The last `n` Unicode code points of UTF-8 text (Python's solution_str[-300:] counts code points, not bytes).
std::string last_code_points(const std::string& s, size_t n) {
  size_t at = s.size();
  for (size_t seen = 0; at > 0 && seen < n;) {
    --at;
    if ((static_cast<unsigned char>(s[at]) & 0xC0) != 0x80) ++seen;  // not a continuation byte
  }
  return s.substr(at);
}

// veRL gsm8k.py extract_solution, method "strict": the last match of re.findall("#### (\-?[0-9\.\,]+)"), ','
// removed (their '$' removal cannot apply: '$' is not in the pattern). Matches cannot overlap, so the last match
// starts at the last "#### " followed by a non-empty run of [0-9.,], after an optional '-'.
std::optional<std::string> last_hash_answer(const std::string& text) {
  const std::string marker = "#### ";
  for (size_t at = text.rfind(marker); at != std::string::npos;
       at = at == 0 ? std::string::npos : text.rfind(marker, at - 1)) {
    const size_t begin = at + marker.size();
    const size_t digits = begin < text.size() && text[begin] == '-' ? begin + 1 : begin;
    const size_t end = std::min(text.find_first_not_of("0123456789.,", digits), text.size());
    if (end == digits) continue;
    std::string answer = text.substr(begin, end - begin);
    answer.erase(std::remove(answer.begin(), answer.end(), ','), answer.end());
    return answer;
  }
  return std::nullopt;
}

// The text between the '{' at `open` and its matching '}' (Hendrycks' brace counting); nullopt when unbalanced.
std::optional<std::string> braced_content(const std::string& s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == '{') ++depth;
    if (s[i] == '}' && --depth == 0) return s.substr(open + 1, i - open - 1);
  }
  return std::nullopt;
}

// Hendrycks remove_right_units: "\text{ " (with a space) only marks units, so the answer is what precedes it. (They
// assert a single occurrence; we cut at the first.)
std::string remove_right_units(const std::string& s) {
  const size_t at = s.find("\\text{ ");
  return at == std::string::npos ? s : s.substr(0, at);
}

// Minerva's normalize_final_answer (veRL math_dapo.py) unwraps \text{X}, \textbf{X}; we also unwrap \mbox, \mathrm.
std::string unwrap_text_commands(std::string s) {
  for (const std::string command : {"\\text{", "\\textbf{", "\\mbox{", "\\mathrm{"}) {
    for (size_t at = s.find(command); at != std::string::npos; at = s.find(command, at)) {
      const size_t open = at + command.size() - 1;
      const std::optional<std::string> inner = braced_content(s, open);
      if (!inner) break;
      s.replace(at, open - at + inner->size() + 2, *inner);
    }
  }
  return s;
}

// Hendrycks _fix_sqrt: \sqrt3 -> \sqrt{3} (one character). Runs after whitespace removal here, so "\sqrt 3" works.
std::string fix_sqrt(const std::string& s) {
  const std::vector<std::string> parts = split(s, "\\sqrt");
  std::string out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    out += (p.empty() || p[0] == '{') ? "\\sqrt" + p : "\\sqrt{" + p.substr(0, 1) + "}" + p.substr(1);
  }
  return out;
}

// Hendrycks _fix_fracs: \frac12 -> \frac{1}{2}, \frac1{72} -> \frac{1}{72}; unchanged when a \frac has fewer than
// two characters after it.
std::string fix_fracs(const std::string& s) {
  const std::vector<std::string> parts = split(s, "\\frac");
  std::string out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    out += "\\frac";
    if (!p.empty() && p[0] == '{') {
      out += p;
      continue;
    }
    if (p.size() < 2) return s;
    const std::string a(1, p[0]), b(1, p[1]);
    out += b != "{" ? "{" + a + "}{" + b + "}" + p.substr(2) : "{" + a + "}" + b + p.substr(2);
  }
  return out;
}

// Hendrycks _fix_a_slash_b: "a/b" of integers as Python's str(int(x)) writes them -> \frac{a}{b}.
std::string fix_a_slash_b(const std::string& s) {
  static const std::regex pattern(R"((-?[1-9][0-9]*|0)/(-?[1-9][0-9]*|0))");
  std::smatch m;
  if (s.size() > kMaxNumberChars || !std::regex_match(s, m, pattern)) return s;
  return "\\frac{" + m[1].str() + "}{" + m[2].str() + "}";
}

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\n\r");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\n\r") - begin + 1);
}

// A plain decimal number: "12", "-3.", "0.50", ".5", "+7", thousands commas "1,000" / "-12,345.5".
std::optional<double> plain_number(const std::string& s) {
  static const std::regex decimal(R"([-+]?([0-9]+\.?[0-9]*|\.[0-9]+))");
  static const std::regex thousands(R"([-+]?[0-9]{1,3}(,[0-9]{3})+(\.[0-9]*)?)");
  if (s.size() > kMaxNumberChars) return std::nullopt;
  if (!std::regex_match(s, decimal) && !std::regex_match(s, thousands)) return std::nullopt;
  std::string digits;
  for (char c : s)
    if (c != ',') digits += c;
  return std::strtod(digits.c_str(), nullptr);
}

std::optional<double> quotient(const std::string& numerator, const std::string& denominator) {
  const std::optional<double> a = plain_number(numerator), b = plain_number(denominator);
  if (!a || !b || *b == 0) return std::nullopt;
  return *a / *b;
}

}  // namespace

std::optional<std::string> gsm8k_final_answer(const std::string& response) {
  return last_hash_answer(last_code_points(response, kGsm8kClipChars));
}

// Hendrycks last_boxed_only_string (the last "\boxed", else the last "\fbox"; braces counted to the matching '}')
// and remove_boxed; the "\boxed <token>" form is lm-evaluation-harness's (kept by veRL), cut at whitespace or '$'.
std::optional<std::string> last_boxed(const std::string& response) {
  std::string keyword = "\\boxed";
  size_t at = response.rfind(keyword);
  if (at == std::string::npos) {
    keyword = "\\fbox";
    at = response.rfind(keyword);
  }
  if (at == std::string::npos) return std::nullopt;
  const size_t after = at + keyword.size();
  const size_t start = response.find_first_not_of(' ', after);
  if (start == std::string::npos) return std::nullopt;
  if (response[start] == '{') return braced_content(response, start);
  if (start == after) return std::nullopt;  // "\boxedx": not a \boxed command
  const size_t end = response.find_first_of(" \t\n\r$", start);
  return response.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

// Hendrycks _strip_string (veRL math_reward.py strip_string), step by step, with the additions named in the header.
std::string normalize_math_answer(const std::string& answer) {
  std::string s = replace_all(replace_all(answer, "\n", ""), "\r", "");
  s = replace_all(s, "\\!", "");
  s = replace_all(s, "\\\\", "\\");
  s = replace_all(replace_all(s, "tfrac", "frac"), "dfrac", "frac");
  s = replace_all(replace_all(s, "\\left", ""), "\\right", "");
  s = replace_all(replace_all(s, "^{\\circ}", ""), "^\\circ", "");
  s = replace_all(replace_all(s, "\\$", ""), "$", "");  // Hendrycks: "\$" only; GSM8K's rule drops "$" too
  s = remove_right_units(s);
  s = unwrap_text_commands(s);
  s = replace_all(replace_all(s, "\\%", ""), "%", "");  // Hendrycks drops both; veRL's copy drops "\%" only
  s = trim(s);
  if (!s.empty() && s.back() == '.') s.pop_back();  // ours: "the answer is 5." -> "5"
  s = replace_all(replace_all(s, " .", " 0."), "{.", "{0.");
  if (!s.empty() && s[0] == '.') s = "0" + s;
  const std::vector<std::string> sides = split(s, "=");  // "k = 5" -> "5"
  if (sides.size() == 2 && sides[0].size() <= 2) s = sides[1];
  s.erase(std::remove_if(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); }), s.end());
  return fix_a_slash_b(fix_fracs(fix_sqrt(s)));
}

std::optional<double> math_answer_value(const std::string& answer) {
  std::string s = normalize_math_answer(answer);
  if (s.size() > kMaxNumberChars) return std::nullopt;
  if (const std::optional<double> v = plain_number(s)) return v;
  const double sign = !s.empty() && s[0] == '-' ? -1 : 1;  // "-\frac{1}{2}"
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.erase(0, 1);
  static const std::regex frac(R"(\\frac\{([^{}]*)\}\{([^{}]*)\})");
  static const std::regex slash(R"(([^/]*)/([^/]*))");
  std::smatch m;
  if (!std::regex_match(s, m, frac) && !std::regex_match(s, m, slash)) return std::nullopt;
  const std::optional<double> q = quotient(m[1].str(), m[2].str());
  if (!q) return std::nullopt;
  return sign * *q;
}

bool math_answers_equal(const std::string& given, const std::string& truth) {
  const std::optional<double> a = math_answer_value(given), b = math_answer_value(truth);
  if (a && b) return std::fabs(*a - *b) <= std::max(1e-12, 1e-9 * std::max(std::fabs(*a), std::fabs(*b)));
  const std::string x = normalize_math_answer(given);
  return !x.empty() && x == normalize_math_answer(truth);
}

// veRL's examples/data_preprocess: math_dataset.py keeps remove_boxed(last_boxed_only_string(solution)), gsm8k.py
// the "#### N" number with commas removed.
std::string math_ground_truth_answer(const std::string& ground_truth) {
  if (std::optional<std::string> boxed = last_boxed(ground_truth)) return *boxed;
  if (std::optional<std::string> hash = last_hash_answer(ground_truth)) return *hash;
  return ground_truth;
}

namespace {

MathScore score_answer(const std::optional<std::string>& answer, const std::string& ground_truth) {
  MathScore s;
  s.format_ok = answer.has_value();
  s.correct = s.format_ok && math_answers_equal(*answer, math_ground_truth_answer(ground_truth));
  s.score = s.correct ? 1.0 : 0.0;
  return s;
}

}  // namespace

MathScore score_gsm8k(const std::string& response, const std::string& ground_truth) {
  return score_answer(gsm8k_final_answer(response), ground_truth);
}

MathScore score_math(const std::string& response, const std::string& ground_truth) {
  std::optional<std::string> answer = last_boxed(response);
  if (!answer) answer = gsm8k_final_answer(response);
  return score_answer(answer, ground_truth);
}

}  // namespace ppo
