// libFuzzer target for reading a tokenizer.json (text/bpe_tokenizer.cpp): the input is the file's text, or a recipe
// for one nested past libFuzzer's input length (tests/fuzz/fuzz_support.h expand_deep). Loading must
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
#include "common/json.h"
#include "tests/fuzz/fuzz_support.h"
#include "text/bpe_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string file_text = ppo_fuzz::expand_deep(data, size);
  try {
    // Read from a file, as ppo does: through the depth-bounded JSON reader (common/json.h).
    const nlohmann::json tokenizer_json = ppo::read_json_file(ppo_fuzz::file_with(0, file_text));
    // The fuzzer may put tokenizer_config.json's keys (bos_token, eos_token, ...) under this key.
    const nlohmann::json config = tokenizer_json.is_object()
                                      ? tokenizer_json.value("__tokenizer_config__", nlohmann::json::object())
                                      : nlohmann::json::object();
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
