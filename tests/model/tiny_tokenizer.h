// A hand-built byte-level BPE tokenizer.json for tests (test_bpe.cpp derives its ids by hand; the CLI and model.path
// tests write it into folders). Header-only: every function is inline.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "text/unicode.h"

namespace ppo_test {

// GPT-2 bytes_to_unicode, written again here (not taken from the library) so the tests check the library's table.
inline std::string byte_char(int b) {
  int n = 0;
  for (int x = 0; x < 256; ++x) {
    const bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
    if (x == b) {
      std::string s;
      ppo::utf8_append(s, printable ? x : 256 + n);
      return s;
    }
    if (!printable) ++n;
  }
  return "";
}

inline const char* const kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline const char* const kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline const char* const kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Vocab: the 256 byte tokens with id = byte value, then he 256, ll 257, hell 258, hello 259, Ġw 260.
// Merges by rank: (h,e) 0, (l,l) 1, (he,ll) 2, (hell,o) 3, (Ġ,w) 4. Added: <|im_start|> 300 special, <think> 301.
inline nlohmann::json tiny_tokenizer_json(const std::string& split_regex = kQwen2Regex) {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  const std::string g = byte_char(' ');  // "Ġ"
  vocab["he"] = 256, vocab["ll"] = 257, vocab["hell"] = 258, vocab["hello"] = 259, vocab[g + "w"] = 260;
  json merges = {"h e", "l l", json::array({"he", "ll"}), "hell o", g + " w"};
  return {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 300}, {"content", "<|im_start|>"}, {"special", true}},
        {{"id", 301}, {"content", "<think>"}, {"special", false}}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", split_regex}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
  };
}

}  // namespace ppo_test
