#include "text/tokenizers.h"

#include "common/error.h"
#include "text/bpe_tokenizer.h"

namespace ppo {

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec) {
  if (spec == "char") return std::make_unique<CharTokenizer>();
  try {
    return std::make_unique<BpeTokenizer>(spec);
  } catch (const UsageError& e) {
    throw UsageError("model.tokenizer: '" + spec + "' is neither 'char' nor a usable tokenizer.json or folder (" +
                     e.what() + ")");
  }
}

}  // namespace ppo
