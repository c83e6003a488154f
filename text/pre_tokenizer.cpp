// See text/pre_tokenizer.h.
#include "text/pre_tokenizer.h"

#include <cstdint>

#include "text/unicode.h"

namespace ppo {
namespace {

// The Split regexes implemented here, spelled as in tokenizer.json.
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen3.5 / 3.6: Qwen2's with \p{M} (marks) joining the letters.
const char* const kQwen35Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum CharClass : uint8_t { kOther, kLetter, kNumber, kSpace };

struct CodePoints {
  std::vector<char32_t> cp;
  std::vector<uint8_t> cls;
  std::vector<size_t> offset;  // byte offset of each code point, plus the end
  size_t size() const { return cp.size(); }
};

// Invalid UTF-8 bytes become one "other" character each, so their bytes survive. With `marks_are_letters` (Qwen3.5)
// \p{M} counts as a letter: its regex writes [\p{L}\p{M}]+ and [^\s\p{L}\p{M}\p{N}] where Qwen2's has \p{L}+ and
// [^\s\p{L}\p{N}]; the optional prefix [^\r\n\p{L}\p{N}]? may be a mark, but a mark before letters joins their run
// either way, so the match ends at the same place.
CodePoints classify(const std::string& text, bool marks_are_letters) {
  CodePoints c;
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    size_t len = utf8_sequence_length(text, i, &cp);
    if (len == 0) cp = 0xFFFD, len = 1;
    c.cp.push_back(cp);
    c.cls.push_back(unicode_is_letter(cp)                      ? kLetter
                    : unicode_is_number(cp)                    ? kNumber
                    : unicode_is_whitespace(cp)                ? kSpace
                    : marks_are_letters && unicode_is_mark(cp) ? kLetter
                                                               : kOther);
    c.offset.push_back(i);
    i += len;
  }
  c.offset.push_back(text.size());
  return c;
}

// Length of 's|'t|'re|'ve|'m|'ll|'d at i (0 if none), ASCII case-folded when ignore_case.
size_t contraction(const CodePoints& c, size_t i, bool ignore_case) {
  if (c.cp[i] != '\'') return 0;
  for (const char* suffix : {"s", "t", "re", "ve", "m", "ll", "d"}) {
    size_t k = 0;
    for (; suffix[k]; ++k) {
      if (i + 1 + k >= c.size()) break;
      char32_t ch = c.cp[i + 1 + k];
      if (ignore_case && ch >= 'A' && ch <= 'Z') ch += 'a' - 'A';
      if (ch != static_cast<char32_t>(suffix[k])) break;
    }
    if (!suffix[k]) return 1 + k;
  }
  return 0;
}

// Where a whitespace run [i, end) matched by the last two alternatives \s+(?!\S)|\s+ ends: before its last
// character when a non-space follows (that character then joins the next pre-token), else at its end.
size_t whitespace_match_end(size_t i, size_t end, size_t n) {
  return end == n || end - i == 1 ? end : end - 1;
}

// End of the match at i of the Qwen2 / Llama-3 pattern (max_digits 1 / 3); alternatives in order, as the regex
// engine tries them.
size_t match_qwen2(const CodePoints& c, size_t i, size_t max_digits) {
  const size_t n = c.size();
  const auto is = [&](size_t k, CharClass cl) { return k < n && c.cls[k] == cl; };
  const auto crlf = [&](size_t k) { return k < n && (c.cp[k] == '\r' || c.cp[k] == '\n'); };
  const auto run = [&](size_t k, CharClass cl) {
    while (k < n && c.cls[k] == cl) ++k;
    return k;
  };
  if (size_t len = contraction(c, i, /*ignore_case=*/true)) return i + len;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!crlf(i) && !is(i, kLetter) && !is(i, kNumber) && is(i + 1, kLetter)) return run(i + 1, kLetter);
  if (is(i, kLetter)) return run(i, kLetter);
  // \p{N} or \p{N}{1,3}: look no further than max_digits (a long digit run stays linear).
  if (is(i, kNumber)) {
    size_t k = i + 1;
    while (k < i + max_digits && is(k, kNumber)) ++k;
    return k;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  size_t j = c.cp[i] == ' ' && is(i + 1, kOther) ? i + 1 : i;
  if (is(j, kOther)) {
    j = run(j, kOther);
    while (crlf(j)) ++j;
    return j;
  }
  // c.cp[i] is whitespace. \s*[\r\n]+ ends after the run's last CR/LF.
  const size_t end = run(i, kSpace);
  for (size_t k = end; k > i; --k)
    if (crlf(k - 1)) return k;
  return whitespace_match_end(i, end, n);
}

size_t match_gpt2(const CodePoints& c, size_t i) {
  const size_t n = c.size();
  const auto run = [&](size_t k, CharClass cl) {
    while (k < n && c.cls[k] == cl) ++k;
    return k;
  };
  if (size_t len = contraction(c, i, /*ignore_case=*/false)) return i + len;
  // ' ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+'
  const size_t j = c.cp[i] == ' ' && i + 1 < n ? i + 1 : i;
  if (c.cls[j] != kSpace) return run(j, static_cast<CharClass>(c.cls[j]));
  return whitespace_match_end(i, run(i, kSpace), n);
}

}  // namespace

std::vector<std::string> split_text(const std::string& text, BpeSplit split) {
  if (split == BpeSplit::kNone) return text.empty() ? std::vector<std::string>{} : std::vector<std::string>{text};
  const CodePoints c = classify(text, /*marks_are_letters=*/split == BpeSplit::kQwen35);
  std::vector<std::string> pieces;
  for (size_t i = 0; i < c.size();) {
    const size_t end = split == BpeSplit::kGpt2     ? match_gpt2(c, i)
                       : split == BpeSplit::kLlama3 ? match_qwen2(c, i, 3)
                                                    : match_qwen2(c, i, 1);
    pieces.push_back(text.substr(c.offset[i], c.offset[end] - c.offset[i]));
    i = end;
  }
  return pieces;
}

BpeSplit split_of_regex(const std::string& regex) {
  return regex == kQwen2Pattern    ? BpeSplit::kQwen2
         : regex == kQwen35Pattern ? BpeSplit::kQwen35
         : regex == kLlama3Pattern ? BpeSplit::kLlama3
         : regex == kGpt2Pattern   ? BpeSplit::kGpt2
                                   : BpeSplit::kNone;
}

}  // namespace ppo
