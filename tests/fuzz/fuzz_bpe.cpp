// libFuzzer target for the byte-level BPE tokenizer (text/bpe_tokenizer.cpp) and its Unicode helpers
// (text/unicode.cpp), on real tokenizer.json files: SmolLM2's (GPT-2 split, no normalizer), and the small tokenizers
// trained with Qwen2's settings (Qwen2 split, NFC) and Llama-3's (Llama-3 split, ignore_merges) that
// scripts/install-deps.sh puts under .ref/, plus the Qwen2 one with Qwen3.5's split regex. The input's first byte picks
// the tokenizer by its value mod 4 (so the seeds under tests/fuzz/bpe/ start with '0' SmolLM2, '1' Qwen2, '2' Llama-3
// or '3' Qwen3.5), the rest is the text. Encoding never throws, and:
//   - every id is a token of the vocabulary;
//   - the pre-tokens are non-empty and concatenate to the text;
//   - decode(encode(s)) == s when every byte of s has a token and, for NFC tokenizers, s is valid UTF-8 that NFC
//     leaves as it is;
//   - NFC is idempotent, and UTF-8 decoding then encoding gives back valid UTF-8.
// Any exception, crash, sanitizer report or failed check is a bug. The reference folder is $PPO_REF_DIR, else .ref/ of
// the source tree this was built from. Built and run by scripts/fuzz.sh (`bash scripts/fuzz.sh build 30 bpe`).
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "text/bpe_tokenizer.h"
#include "text/unicode.h"

#ifndef PPO_SOURCE_DIR
#define PPO_SOURCE_DIR "."
#endif

namespace {

using nlohmann::json;

struct FuzzedTokenizer {
  std::string name;
  std::unique_ptr<ppo::BpeTokenizer> tokenizer;
  bool nfc = false;                  // tokenizer.json has a normalizer (NFC, the only one supported)
  std::array<bool, 256> has_byte{};  // the byte has a token (SmolLM2 lacks 21 bytes, which encode drops)
};

std::vector<FuzzedTokenizer>& tokenizers() {
  static std::vector<FuzzedTokenizer> loaded;
  return loaded;
}

[[noreturn]] void finding(const FuzzedTokenizer& t, const std::string& text, const std::string& what) {
  std::fprintf(stderr, "fuzz_bpe: %s: %s, text %s\n", t.name.c_str(), what.c_str(),
               json(text).dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  std::abort();
}

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr,
                 "fuzz_bpe: %s is missing: this target fuzzes the reference tokenizers that scripts/install-deps.sh "
                 "puts under .ref/ (set PPO_REF_DIR to a folder holding them)\n",
                 path.c_str());
    std::exit(1);
  }
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

// `folder`'s tokenizer.json and tokenizer_config.json; `split_regex`, when set, replaces the Split step's regex.
void load(const std::string& name, const std::string& folder, const std::string& split_regex = "") {
  json tokenizer_json = read_json(folder + "/tokenizer.json");
  if (!split_regex.empty()) tokenizer_json["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = split_regex;
  FuzzedTokenizer t;
  t.name = name;
  t.nfc = !tokenizer_json.value("normalizer", json()).is_null();
  t.tokenizer =
      std::make_unique<ppo::BpeTokenizer>(tokenizer_json, folder, read_json(folder + "/tokenizer_config.json"));
  for (int b = 0; b < 256; ++b) t.has_byte[b] = !t.tokenizer->encode(std::string(1, static_cast<char>(b))).empty();
  tokenizers().push_back(std::move(t));
}

void check(const FuzzedTokenizer& t, const std::string& text) {
  const ppo::BpeTokenizer& tok = *t.tokenizer;
  const std::vector<int64_t> ids = tok.encode(text);
  for (int64_t id : ids)
    if (id < 0 || id >= tok.vocab_size() || tok.decode({id}, /*skip_special=*/false).empty())
      finding(t, text, "encode gave id " + std::to_string(id) + ", not a token");
  std::string joined;
  for (const std::string& piece : tok.pre_tokenize(text)) {
    if (piece.empty()) finding(t, text, "an empty pre-token");
    joined += piece;
  }
  if (joined != text) finding(t, text, "the pre-tokens do not concatenate to the text");
  tok.decode(ids, /*skip_special=*/true);
  const std::string decoded = tok.decode(ids, /*skip_special=*/false);
  bool all_bytes = true;
  for (char b : text) all_bytes = all_bytes && t.has_byte[static_cast<uint8_t>(b)];
  // NFC is applied to each piece between added tokens, and leaves a piece with invalid UTF-8 as it is: with NFC, only
  // valid UTF-8 that NFC leaves as it is comes back whole.
  const bool nfc_stable = !t.nfc || (ppo::utf8_is_valid(text) && ppo::unicode_nfc(text) == text);
  if (all_bytes && nfc_stable && decoded != text)
    finding(t, text, "decode(encode(text)) gave " + json(decoded).dump(-1, ' ', false, json::error_handler_t::replace));
}

void check_unicode(const std::string& text) {
  const std::string nfc = ppo::unicode_nfc(text);
  if (ppo::unicode_nfc(nfc) != nfc) finding(tokenizers().front(), text, "NFC is not idempotent");
  const std::string recoded = ppo::utf8_encode(ppo::utf8_decode(text));
  if (!ppo::utf8_is_valid(recoded) || (ppo::utf8_is_valid(text) && recoded != text))
    finding(tokenizers().front(), text, "utf8_encode(utf8_decode(text)) is not the text / not valid UTF-8");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* env = std::getenv("PPO_REF_DIR");
  const std::string ref = env && *env ? env : PPO_SOURCE_DIR "/.ref";
  const std::string qwen35_regex = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N})"
                                   R"(| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  load("smollm2", ref + "/smollm2-135m-instruct");
  load("trained-qwen2", ref + "/tokenizers/trained-qwen2");
  load("trained-llama3", ref + "/tokenizers/trained-llama3");
  load("trained-qwen2 with Qwen3.5's split", ref + "/tokenizers/trained-qwen2", qwen35_regex);
  if (tokenizers()[3].tokenizer->split() != ppo::BpeSplit::kQwen35) {
    std::fprintf(stderr, "fuzz_bpe: the Qwen3.5 regex was not recognised\n");
    std::exit(1);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const FuzzedTokenizer& t = tokenizers()[data[0] % tokenizers().size()];
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  check(t, text);
  check_unicode(text);
  return 0;
}
