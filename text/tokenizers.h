// The tokenizer a run names: model.tokenizer is the built-in character tokenizer (text/tokenizer.h) or a Hugging Face
// tokenizer.json (text/bpe_tokenizer.h).
#pragma once

#include <memory>
#include <string>

#include "text/tokenizer.h"

namespace ppo {

// `spec` is model.tokenizer: "char" (built in), or a tokenizer.json / a folder holding one (BpeTokenizer,
// text/bpe_tokenizer.h). Anything else throws UsageError naming model.tokenizer.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec);

}  // namespace ppo
