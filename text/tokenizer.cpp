#include "text/tokenizer.h"

namespace ppo {

namespace {

int64_t char_to_id(unsigned char c) {
  if (c == '\n') return CharTokenizer::kNewline;
  if (c == '\t') c = ' ';
  if (c < 32 || c > 126) c = '?';
  return CharTokenizer::kFirstPrintable + (static_cast<int64_t>(c) - 32);
}

}  // namespace

std::vector<int64_t> CharTokenizer::encode(const std::string& text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(char_to_id(static_cast<unsigned char>(c)));
  return ids;
}

std::string CharTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special) const {
  static const char* const kSpecialNames[] = {"<pad>", "<bos>", "<eos>"};
  std::string text;
  text.reserve(ids.size());
  for (int64_t id : ids) {
    if (id >= kPad && id <= kEos) {
      if (!skip_special) text += kSpecialNames[id];
    } else if (id == kNewline) {
      text += '\n';
    } else if (id >= kFirstPrintable && id < kVocabSize) {
      text += static_cast<char>(32 + (id - kFirstPrintable));
    } else {
      text += '?';
    }
  }
  return text;
}

const std::string& CharTokenizer::chat_template() const {
  static const std::string kNone;
  return kNone;
}

}  // namespace ppo
