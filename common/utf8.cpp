// See common/utf8.h.
#include "common/utf8.h"

#include <cstdint>

namespace ppo {

namespace {

constexpr char32_t kReplacement = 0xFFFD;

// How many bytes of text[i..] are a prefix of a well-formed sequence (Unicode 15, Table 3-7), at least 1.
size_t ill_formed_subpart(const std::string& text, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(text[i + k]); };
  const uint8_t lead = b(0);
  const size_t len = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
  if (lead < 0xC2 || lead > 0xF4) return 1;
  // The second byte's range depends on the lead (no overlongs, surrogates or code points above U+10FFFF).
  const uint8_t lo = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
  const uint8_t hi = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
  size_t k = 1;
  for (; k < len && i + k < text.size(); ++k) {
    const uint8_t c = b(k);
    if (k == 1 ? (c < lo || c > hi) : (c & 0xC0) != 0x80) break;
  }
  return k;
}

}  // namespace

size_t utf8_sequence_length(const std::string& text, size_t i, char32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(text[i + k]); };
  const uint8_t b0 = b(0);
  if (b0 < 0x80) return *cp = b0, 1;
  size_t len = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC0 ? 2 : 0;
  if (len == 0 || b0 > 0xF4 || i + len > text.size()) return 0;
  char32_t value = b0 & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    value = (value << 6) | (b(k) & 0x3F);
  }
  static const char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (value < kMin[len] || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return 0;
  *cp = value;
  return len;
}

bool utf8_is_valid(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const size_t len = utf8_sequence_length(text, i, &cp);
    if (!len) return false;
    i += len;
  }
  return true;
}

size_t first_invalid_utf8_line(const std::string& text) {
  size_t line = 1;
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const size_t length = utf8_sequence_length(text, i, &cp);
    if (length == 0) return line;
    if (cp == '\n') ++line;
    i += length;
  }
  return 0;
}

std::vector<char32_t> utf8_decode(const std::string& text) {
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const size_t len = utf8_sequence_length(text, i, &cp);
    cps.push_back(len ? cp : kReplacement);
    i += len ? len : 1;
  }
  return cps;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string utf8_encode(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) utf8_append(out, cp);
  return out;
}

std::string utf8_lossy(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const size_t len = utf8_sequence_length(text, i, &cp);
    if (len) {
      out.append(text, i, len);
      i += len;
    } else {
      utf8_append(out, kReplacement);
      i += ill_formed_subpart(text, i);
    }
  }
  return out;
}

std::string utf8_printable(const std::string& text) {
  std::string out;
  for (const char c : utf8_lossy(text)) {
    const auto b = static_cast<uint8_t>(c);
    if ((b < 0x20 && c != '\n' && c != '\t') || b == 0x7F) {
      static const char kHex[] = "0123456789abcdef";
      out += std::string("\\x") + kHex[b >> 4] + kHex[b & 15];
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace ppo
