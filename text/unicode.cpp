// See text/unicode.h. NFC follows UAX #15 (https://unicode.org/reports/tr15/): full canonical decomposition,
// canonical ordering of combining marks, then canonical composition; Hangul syllables arithmetically (Unicode
// ch. 3.12).
#include "text/unicode.h"

#include <algorithm>
#include <iterator>

#include "text/unicode_tables.h"

namespace ppo {
namespace {

namespace ut = unicode_tables;

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

}  // namespace

namespace {

template <typename Table>
const ut::Range* find_range(const Table& table, char32_t cp) {
  auto it = std::upper_bound(std::begin(table), std::end(table), cp,
                             [](char32_t v, const ut::Range& r) { return v < r.first; });
  if (it == std::begin(table)) return nullptr;
  --it;
  return cp <= it->last ? &*it : nullptr;
}

int char_class(char32_t cp) {
  const ut::Range* r = find_range(ut::kClassRanges, cp);
  return r ? r->value : 0;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const int s = static_cast<int>(cp - kSBase);
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  auto it = std::lower_bound(std::begin(ut::kDecompositions), std::end(ut::kDecompositions), cp,
                             [](const ut::Decomposition& d, char32_t v) { return d.cp < v; });
  if (it == std::end(ut::kDecompositions) || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  decompose(it->first, out);
  if (it->second) decompose(it->second, out);
}

// The primary composite of (a, b), or 0.
char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto key = [](uint32_t first, uint32_t second) { return (uint64_t{first} << 32) | second; };
  const uint64_t wanted = key(a, b);
  auto it = std::lower_bound(std::begin(ut::kCompositions), std::end(ut::kCompositions), wanted,
                             [&](const ut::Composition& c, uint64_t v) { return key(c.first, c.second) < v; });
  return it != std::end(ut::kCompositions) && it->first == a && it->second == b ? it->composed : 0;
}

}  // namespace

bool unicode_is_letter(char32_t cp) {
  return char_class(cp) == 1;
}
bool unicode_is_number(char32_t cp) {
  return char_class(cp) == 2;
}
bool unicode_is_mark(char32_t cp) {
  return char_class(cp) == 4;
}
bool unicode_is_whitespace(char32_t cp) {
  return char_class(cp) == 3;
}

int unicode_combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const ut::Range* r = find_range(ut::kCombiningClassRanges, cp);
  return r ? r->value : 0;
}

std::vector<char32_t> unicode_nfc(const std::vector<char32_t>& cps) {
  // Below U+0300 nothing decomposes, combines or composes (asserted by the table generator).
  if (std::all_of(cps.begin(), cps.end(), [](char32_t c) { return c < 0x300; })) return cps;
  std::vector<char32_t> d;
  d.reserve(cps.size() + 8);
  for (char32_t cp : cps) decompose(cp, d);
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < d.size();) {
    size_t j = i;
    while (j < d.size() && unicode_combining_class(d[j]) != 0) ++j;
    if (j > i + 1)
      std::stable_sort(d.begin() + i, d.begin() + j,
                       [](char32_t a, char32_t b) { return unicode_combining_class(a) < unicode_combining_class(b); });
    i = j + 1;
  }
  // Canonical composition: each character joins the last starter unless blocked by a mark of class >= its own.
  std::vector<char32_t> out;
  out.reserve(d.size());
  size_t starter = SIZE_MAX;
  int last_ccc = -1;
  for (char32_t cp : d) {
    const int ccc = unicode_combining_class(cp);
    if (starter != SIZE_MAX && (last_ccc < ccc || (last_ccc == 0 && out.size() == starter + 1))) {
      if (char32_t c = compose_pair(out[starter], cp)) {
        out[starter] = c;
        continue;
      }
    }
    if (ccc == 0) starter = out.size();
    last_ccc = ccc;
    out.push_back(cp);
  }
  return out;
}

std::string unicode_nfc(const std::string& text) {
  // U+0300 and up start with a byte >= 0xCC. Invalid UTF-8 is left as it is (its bytes must survive encoding).
  const bool ascii_fast = std::all_of(text.begin(), text.end(), [](char c) { return static_cast<uint8_t>(c) < 0xCC; });
  if (ascii_fast || !utf8_is_valid(text)) return text;
  return utf8_encode(unicode_nfc(utf8_decode(text)));
}

}  // namespace ppo
