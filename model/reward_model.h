// A reward model: a Hugging Face *ForSequenceClassification folder with one label (a Qwen2, Llama, Qwen3 or Mistral
// backbone, then score.weight [1, hidden], no bias), read as transformers' AutoModelForSequenceClassification reads
// it, with the folder's own tokenizer and chat template. Its model, placed and sharded as the reference policy's, is
// workers/reward_worker.h's.
//
// A sequence's score is the score head on the hidden state of one token, the one transformers picks: the last token
// that is not the config's pad_token_id (a response ending in that id is scored before it; a sequence made only of it
// is scored at its first token). Without a pad_token_id, the last token: transformers then refuses batches of more
// than one sequence, which left padding and the attention mask make safe here.
#pragma once

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/hf.h"
#include "model/transformer.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace ppo {

// Scores [B] (float32) of left-padded sequences `ids` [B, T] with their attention mask [B, T] (1 = real token), in
// eval mode and without gradients. `model`'s value_head is the score head. Padding on either side.
torch::Tensor sequence_scores(ValueModel& model, const torch::Tensor& ids, const torch::Tensor& mask,
                              int64_t pad_token_id);
// The same forward on packed sequences (model/packing.h): every row's real tokens end to end, nothing spent on
// padding; equal within float rounding. Every row must have a real token.
torch::Tensor packed_sequence_scores(ValueModel& model, const torch::Tensor& ids, const torch::Tensor& mask,
                                     int64_t pad_token_id);

// A reward model's folder: checked, with its tokenizer and chat template (the model itself is
// workers/reward_worker.h's).
class RewardModelFolder {
 public:
  // Reads and checks `dir`: config.json (`base` gives what it does not: dtype, attention implementation), the
  // safetensors' score.weight, tokenizer.json (or ppo export's char_tokenizer.txt: the built-in char tokenizer) and
  // the chat template beside it. A folder that is not a one-label
  // sequence classifier, or has no score.weight, or no tokenizer.json, is a UsageError naming the file and what is
  // wrong.
  RewardModelFolder(const std::string& dir, const ModelConfig& base);

  // The ids of a (prompt, response) pair as transformers encodes the conversation for a reward model:
  // apply_chat_template(messages + [{"role": "assistant", "content": response}], tokenize=True) with the folder's
  // chat template (messages: the prompt's chat messages, or the plain prompt as one user message); without a chat
  // template, the tokenizer's BOS where it adds one, then prompt + response.
  std::vector<int64_t> encode(const nlohmann::json& messages, const std::string& response) const;

  // Whether the policy's token ids can be scored as they are: the same tokenizer.json, byte for byte
  // (`policy_tokenizer`: model.tokenizer, a folder or the file; or both the char tokenizer), and, for prompts rendered
  // with a chat template (`policy_chat_template` not null), the same template text as this folder's. Prompts
  // rendered plain (null) are scored as the policy's ids whatever template the folder has: `ppo rm` trains on them so.
  bool reads_policy_ids(const std::string& policy_tokenizer, const std::string* policy_chat_template) const;

  const std::string& dir() const { return dir_; }
  const HfModelInfo& info() const { return info_; }
  // The backbone's shape, with `path` the folder (where its weights are read, whole or a slice at a time).
  const ModelConfig& model_config() const { return info_.config; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  std::string dir_;
  HfModelInfo info_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_;
  bool char_tokens_ = false;  // the built-in char tokenizer (char_tokenizer.txt, as ppo export writes it)
};

// Rows [begin, end) of `rows` (token ids) left-padded into one batch: ids [B, T] (0 on padding) and attention mask
// [B, T], T the longest row (a row without tokens is all padding).
struct PaddedRows {
  torch::Tensor ids, mask;
};
PaddedRows pad_rows_left(const std::vector<std::vector<int64_t>>& rows, size_t begin, size_t end);

}  // namespace ppo
