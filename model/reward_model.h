// A reward model: a Hugging Face *ForSequenceClassification folder with one label (a Qwen2, Llama, Qwen3 or Mistral
// backbone, then score.weight [1, hidden], no bias), read as transformers' AutoModelForSequenceClassification reads
// it, with the folder's own tokenizer and chat template.
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

#include "model/chat_template.h"
#include "model/hf.h"
#include "model/tokenizer.h"
#include "model/transformer.h"

namespace ppo {

// Scores [B] (float32) of left-padded sequences `ids` [B, T] with their attention mask [B, T] (1 = real token), in
// eval mode and without gradients. `model`'s value_head is the score head.
torch::Tensor sequence_scores(ValueModel& model, const torch::Tensor& ids, const torch::Tensor& mask,
                              int64_t pad_token_id);

class RewardModel {
 public:
  // Reads `dir` (config.json, the safetensors, tokenizer.json and the chat template beside it); `base` gives what
  // config.json does not (dtype, attention implementation). A folder that is not a one-label sequence classifier, or
  // has no score.weight, or no tokenizer.json, is a UsageError naming the file and what is wrong.
  RewardModel(const std::string& dir, const ModelConfig& base);

  // The ids of a (prompt, response) pair as transformers encodes the conversation for a reward model:
  // apply_chat_template(messages + [{"role": "assistant", "content": response}], tokenize=True) with the folder's
  // chat template (messages: the prompt's chat messages, or the plain prompt as one user message); without a chat
  // template, the tokenizer's BOS where it adds one, then prompt + response.
  std::vector<int64_t> encode(const nlohmann::json& messages, const std::string& response) const;

  // The scores of `rows` (token ids), `micro_batch` sequences a forward. A non-finite score is a UsageError naming
  // its row.
  std::vector<double> score(const std::vector<std::vector<int64_t>>& rows, int64_t micro_batch);

  const HfModelInfo& info() const { return info_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  std::string dir_;
  HfModelInfo info_;
  ValueModel model_{nullptr};
  std::unique_ptr<Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_;
};

}  // namespace ppo
