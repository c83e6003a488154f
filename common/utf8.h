// UTF-8: code points to bytes and back, validity, and text made valid (lossy) or printable, for every reader of
// text (the config, the tokenizers, decoded responses, error lines).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ppo {

// Decodes UTF-8. An invalid or truncated sequence becomes U+FFFD per bad byte (as the WHATWG decoder does), so
// every input decodes; `utf8_is_valid` tells whether that happened.
std::vector<char32_t> utf8_decode(const std::string& text);
std::string utf8_encode(const std::vector<char32_t>& cps);
void utf8_append(std::string& out, char32_t cp);
bool utf8_is_valid(const std::string& text);
// `text` as valid UTF-8: each maximal subpart of an ill-formed sequence (a lead byte and the continuation bytes that
// could still follow it, or one byte that starts nothing) becomes one U+FFFD, as Rust's String::from_utf8_lossy (the
// Hugging Face tokenizers' decode) and Python's errors="replace" do. Valid text comes back unchanged.
std::string utf8_lossy(const std::string& text);
// utf8_lossy's text for a terminal or a log line: also every control character but newline and tab as \xNN.
std::string utf8_printable(const std::string& text);
// Length of the valid UTF-8 sequence starting at text[i] (storing its code point in *cp), or 0 when the bytes there
// are not one (bad lead or continuation byte, truncated, overlong, surrogate, above U+10FFFF).
size_t utf8_sequence_length(const std::string& text, size_t i, char32_t* cp);
// The line (1-based) of the first byte of `text` that is not valid UTF-8, or 0 when all of it is.
size_t first_invalid_utf8_line(const std::string& text);

}  // namespace ppo
