// Tokenizers: text <-> token ids. The abstract interface is what the rest of ppo.cpp uses; make_tokenizer
// (text/tokenizers.h) picks the built-in character tokenizer below or the byte-level BPE of a Hugging Face
// tokenizer.json (text/bpe_tokenizer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ppo {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Text -> ids. Adds no special tokens (callers prepend bos_id() themselves when they want it).
  virtual std::vector<int64_t> encode(const std::string& text) const = 0;
  // Ids -> text. With skip_special, pad/bos/eos are dropped; otherwise they are written as "<pad>" etc.
  virtual std::string decode(const std::vector<int64_t>& ids, bool skip_special = true) const = 0;
  virtual int64_t vocab_size() const = 0;  // V
  virtual int64_t pad_id() const = 0;
  virtual int64_t bos_id() const = 0;
  virtual int64_t eos_id() const = 0;
  // Whether a plain prompt starts with bos_id(), as Hugging Face's tokenizer(text) (add_special_tokens=True) does it.
  // Prompts rendered by a chat template never get it added: the template writes what the model expects.
  virtual bool add_bos() const = 0;
  // The Jinja chat template stored with the tokenizer (text/chat_template.h); "" when there is none.
  virtual const std::string& chat_template() const = 0;
  virtual std::string name() const = 0;  // e.g. "char"
};

// Character-level tokenizer for the built-in tasks. Ids: 0 <pad>, 1 <bos>, 2 <eos>, 3 '\n', 4..98 the printable
// ASCII characters 32..126 in order (so V = 99). Encoding never fails: '\t' becomes ' ' and every other byte
// outside that set (other control bytes, bytes >= 128, i.e. any UTF-8 multi-byte character) becomes '?'.
// Decoding ids outside [0, V) (possible when model.vocab_size > V) yields '?' as well.
class CharTokenizer : public Tokenizer {
 public:
  static constexpr int64_t kPad = 0, kBos = 1, kEos = 2, kNewline = 3, kFirstPrintable = 4;
  static constexpr int64_t kVocabSize = kFirstPrintable + (126 - 32 + 1);  // 99

  std::vector<int64_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special = true) const override;
  int64_t vocab_size() const override { return kVocabSize; }
  int64_t pad_id() const override { return kPad; }
  int64_t bos_id() const override { return kBos; }
  int64_t eos_id() const override { return kEos; }
  bool add_bos() const override { return true; }
  const std::string& chat_template() const override;  // ""
  std::string name() const override { return "char"; }
};

}  // namespace ppo
