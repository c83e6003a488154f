// Byte-level BPE tokenizer read from a Hugging Face `tokenizer.json` (GPT-2, SmolLM2, Qwen2/2.5/3/3.5, Llama-3
// families).
//
// Encoding, as the Rust `tokenizers` library does it (https://github.com/huggingface/tokenizers, tokenizer/mod.rs):
//   1. added tokens (special or not) are cut out of the raw text first, leftmost-longest, and never split;
//   2. each remaining piece is normalized (none or NFC);
//   3. pre-tokenized by the model's split regex, written by hand (text/pre_tokenizer.h; std::regex has no \p{L}):
//        Qwen2  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
//        ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ Llama3 the same with \p{N}{1,3} GPT-2
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+   (ByteLevel use_regex=true)
//        Qwen3.5/3.6  Qwen2's with [\p{L}\p{M}]+ for \p{L}+ and [^\s\p{L}\p{M}\p{N}] for [^\s\p{L}\p{N}]
//   4. each pre-token's UTF-8 bytes are merged by BPE, lowest merge rank first (leftmost on ties) (models/bpe/word.rs);
//      with model.ignore_merges a pre-token that is itself in the vocabulary is taken whole.
// The GPT-2 byte-to-unicode table (openai/gpt-2 encoder.py bytes_to_unicode) maps vocabulary strings to raw bytes once
// at load, so the merge loop works on bytes and token ids. Decoding concatenates token bytes; the result is raw bytes
// (a token boundary may split a UTF-8 character) and decode(encode(s)) == s for any byte string s that NFC leaves as
// it is.
// Known differences from the Rust library: added tokens with "normalized": true are matched on the raw text (the same
// for ASCII tokens); lstrip / rstrip / single_word look at ASCII whitespace and word characters only; \s is the Unicode
// White_Space property and \p{L} / \p{N} come from Python's unicodedata (text/unicode_tables.h).
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/pre_tokenizer.h"
#include "text/tokenizer.h"

namespace ppo {

struct BpeAddedToken {
  int64_t id = -1;
  std::string content;
  bool special = false;      // dropped by decode(ids, skip_special=true)
  bool lstrip = false;       // the match swallows ASCII whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // only matches when not inside a word
};

class BpeTokenizer : public Tokenizer {
 public:
  // `path`: a tokenizer.json, or a folder holding one. A tokenizer_config.json beside it, when present, names the
  // bos/eos/pad tokens (bos_token, eos_token, pad_token; pad falls back to eos), may set add_bos_token, and may hold
  // the chat template ("chat_template"; a chat_template.jinja beside it wins, as in transformers). Bad files throw
  // UsageError naming them.
  explicit BpeTokenizer(const std::string& path);
  // From parsed JSON; `origin` names the source in error messages.
  BpeTokenizer(const nlohmann::json& tokenizer_json, const std::string& origin,
               const nlohmann::json& tokenizer_config = nlohmann::json::object());

  // Adds no special tokens (the post_processor is not applied), as Tokenizer requires.
  std::vector<int64_t> encode(const std::string& text) const override;
  // Ids without a token (e.g. padding rows of a larger embedding) are skipped, as in the Rust library.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special = true) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_bytes_.size()); }  // max id + 1
  int64_t pad_id() const override { return pad_id_; }  // -1 when the tokenizer has none
  int64_t bos_id() const override { return bos_id_; }  // -1 when the tokenizer has none (Qwen)
  int64_t eos_id() const override { return eos_id_; }  // -1 when the tokenizer has none
  // tokenizer_config.json's add_bos_token when set, else whether the post_processor (TemplateProcessing, alone or
  // in a Sequence) puts the BOS token before the text. SmolLM2 names <|im_start|> its bos_token but its
  // post_processor adds nothing, so its prompts get no BOS.
  bool add_bos() const override { return add_bos_; }
  const std::string& chat_template() const override { return chat_template_; }
  std::string name() const override { return "bpe"; }

  // A token as written in tokenizer.json (vocab key or added-token content) -> id, or -1.
  int64_t token_to_id(const std::string& token) const;
  BpeSplit split() const { return split_; }
  // Step 3 alone, on already normalized text: the pre-tokens as byte strings (for tests).
  std::vector<std::string> pre_tokenize(const std::string& text) const;

 private:
  struct Segment {
    size_t begin, end;  // byte range of the text
    int64_t added_id;   // the added token, or -1 for ordinary text
  };
  void load(const nlohmann::json& tokenizer_json, const std::string& origin);
  void load_model(const nlohmann::json& model, const std::string& origin);
  void load_added_tokens(const nlohmann::json& added, const std::string& origin);
  void load_pipeline(const nlohmann::json& tokenizer_json, const std::string& origin);
  void load_special_ids(const nlohmann::json& config, const std::string& origin);
  std::vector<Segment> split_added_tokens(const std::string& text) const;
  void encode_piece(const std::string& piece, std::vector<int64_t>& ids) const;

  BpeSplit split_ = BpeSplit::kNone;
  bool nfc_ = false;
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;
  int64_t unk_id_ = -1;  // model.unk_token, for bytes without a token; -1: such bytes are dropped
  bool fuse_unk_ = false;
  int64_t pad_id_ = -1, bos_id_ = -1, eos_id_ = -1;
  std::string post_processor_first_;  // the special token TemplateProcessing puts first ("" when none)
  bool add_bos_ = false;
  std::string chat_template_;
  std::unordered_map<std::string, int64_t> token_to_id_;              // tokenizer.json spelling -> id
  std::unordered_map<std::string, int64_t> bytes_to_id_;              // raw bytes of a vocabulary token -> id
  std::vector<std::string> id_to_bytes_;                              // id -> raw bytes ("" for a gap)
  std::vector<int8_t> id_kind_;                                       // 0 gap, 1 vocabulary, 2 added, 3 added special
  std::array<int64_t, 256> byte_id_{};                                // single-byte tokens, -1 when missing
  std::unordered_map<uint64_t, std::pair<int32_t, int64_t>> merges_;  // (left id, right id) -> (rank, merged id)
  std::vector<BpeAddedToken> added_;
  // The added tokens' bytes as a trie, so that matching at a text position walks it once, however many tokens there
  // are (comparing each token that starts with the byte took minutes on a tokenizer with 100,000 added tokens).
  std::unordered_map<uint64_t, int32_t> added_edges_;  // (node << 8 | byte) -> child node; node 0 is the root
  std::vector<std::vector<size_t>> added_ends_;        // node -> indices into added_ of the tokens ending there
};

}  // namespace ppo
