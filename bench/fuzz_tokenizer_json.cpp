// libFuzzer target for reading a tokenizer.json (model/bpe_tokenizer.cpp): the input is the file's text. Loading must
// either succeed or throw ppo::UsageError; a tokenizer that loads then encodes a few fixed texts into ids of its
// vocabulary, and decodes them without throwing. Any other exception, crash, sanitizer report, failed check or
// allocation over 2 GiB (-rss_limit_mb, -malloc_limit_mb) is a bug. Built and run by scripts/fuzz.sh
// (`bash scripts/fuzz.sh build 30 tokenizer_json`).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/bpe_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json tokenizer_json = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (tokenizer_json.is_discarded()) return 0;  // the JSON reader itself is not what is fuzzed here
  // The fuzzer may put tokenizer_config.json's keys (bos_token, eos_token, ...) under this key.
  const nlohmann::json config = tokenizer_json.is_object()
                                    ? tokenizer_json.value("__tokenizer_config__", nlohmann::json::object())
                                    : nlohmann::json::object();
  try {
    const ppo::BpeTokenizer tok(tokenizer_json, "fuzz", config);
    for (const std::string text : {"Hello world, it's 2024!\n", "<|im_start|>user\nhi<|im_end|>", "caf\xC3\xA9 \xFF"}) {
      const std::vector<int64_t> ids = tok.encode(text);
      for (int64_t id : ids) {
        if (id < 0 || id >= tok.vocab_size()) {
          std::fprintf(stderr, "fuzz_tokenizer_json: encode gave id %lld, vocab_size %lld\n",
                       static_cast<long long>(id), static_cast<long long>(tok.vocab_size()));
          std::abort();
        }
      }
      tok.decode(ids, /*skip_special=*/true);
      tok.decode(ids, /*skip_special=*/false);
    }
  } catch (const ppo::UsageError&) {
  }
  return 0;
}
