// See model/reward_model.h.
#include "model/reward_model.h"

#include <algorithm>
#include <filesystem>

#include "common/error.h"
#include "common/files.h"
#include "model/safetensors.h"
#include "text/tokenizers.h"

namespace ppo {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The column [B] of each row's scored token (sequence_scores).
torch::Tensor scored_columns(const torch::Tensor& ids, const torch::Tensor& mask, int64_t pad_token_id) {
  const torch::Tensor real = mask.to(torch::kBool);
  const torch::Tensor candidates = pad_token_id >= 0 ? real.logical_and(ids.ne(pad_token_id)) : real;
  const torch::Tensor columns = torch::arange(ids.size(1), ids.options().dtype(torch::kLong));
  const torch::Tensor last = (columns * candidates.to(torch::kLong)).argmax(1);
  const torch::Tensor first_real = real.to(torch::kLong).argmax(1);  // the first real token's column
  return torch::where(candidates.any(1), last, first_real);
}

}  // namespace

torch::Tensor sequence_scores(ValueModel& model, const torch::Tensor& ids, const torch::Tensor& mask,
                              int64_t pad_token_id) {
  torch::NoGradGuard no_grad;
  model->eval();
  const torch::Tensor positions = position_ids_from_mask(mask);
  const torch::Tensor values = model->forward(ids, positions, mask);  // [B, T] float32
  return values.gather(1, scored_columns(ids, mask, pad_token_id).unsqueeze(1)).squeeze(1);
}

torch::Tensor packed_sequence_scores(ValueModel& model, const torch::Tensor& ids, const torch::Tensor& mask,
                                     int64_t pad_token_id) {
  torch::NoGradGuard no_grad;
  model->eval();
  const torch::Tensor real = mask.to(torch::kBool);
  const torch::Tensor rank = mask.to(torch::kLong).cumsum(1) - 1;  // a real token's index within its row
  const torch::Tensor lengths = real.sum(1).to(torch::kCPU).contiguous();
  TORCH_CHECK(lengths.min().item<int64_t>() >= 1, "packed_sequence_scores: a row without tokens");
  const std::vector<int64_t> counts(lengths.data_ptr<int64_t>(), lengths.data_ptr<int64_t>() + lengths.numel());
  // Row after row, the real tokens end to end, positions restarting with each row.
  const torch::Tensor hidden =
      model->model->forward_packed(ids.masked_select(real).unsqueeze(0), rank.masked_select(real).unsqueeze(0), counts);
  const torch::Tensor offsets = (real.sum(1).cumsum(0) - real.sum(1)).to(torch::kLong);  // [B] each row's start
  const torch::Tensor at = offsets + rank.gather(1, scored_columns(ids, mask, pad_token_id).unsqueeze(1)).squeeze(1);
  return model->values_from_hidden(hidden[0].index_select(0, at));
}

RewardModelFolder::RewardModelFolder(const std::string& dir, const ModelConfig& base)
    : dir_(dir), info_(read_hf_config(dir, base)) {
  const std::string config_json = (fs::path(dir) / "config.json").string();
  usage_check(info_.sequence_classifier, config_json + ": names " + info_.architecture +
                                             "; a reward model is a *ForSequenceClassification folder (Qwen2, Llama, " +
                                             "Qwen3, Mistral)");
  usage_check(info_.num_labels == 1, config_json + ": the classifier has " + std::to_string(info_.num_labels) +
                                         " labels (id2label or num_labels); a reward model has one");
  usage_check(SafetensorsReader::folder(dir).find("score.weight") != nullptr,
              dir + ": no tensor score.weight (the reward model's score head [1, hidden_size])");
  const fs::path tokenizer_json = fs::path(dir) / "tokenizer.json";
  // ppo export's note for the built-in char tokenizer stands for its tokenizer.json.
  char_tokens_ = !fs::is_regular_file(tokenizer_json) && fs::is_regular_file(fs::path(dir) / "char_tokenizer.txt");
  usage_check(char_tokens_ || fs::is_regular_file(tokenizer_json),
              dir + ": no tokenizer.json; a reward model is read with its own tokenizer");
  tokenizer_ = make_tokenizer(char_tokens_ ? "char" : dir);
  usage_check(tokenizer_->vocab_size() <= info_.config.vocab_size,
              tokenizer_json.string() + ": the tokenizer has " + std::to_string(tokenizer_->vocab_size()) +
                  " tokens, more than the reward model's vocab_size " + std::to_string(info_.config.vocab_size));
  if (!tokenizer_->chat_template().empty()) chat_ = ChatTemplate::from_jinja(tokenizer_->chat_template(), dir);
  info_.config.path = dir;
  info_.config.tokenizer = char_tokens_ ? "char" : dir;
}

std::vector<int64_t> RewardModelFolder::encode(const json& messages, const std::string& response) const {
  if (chat_) {
    json conversation = messages;
    conversation.push_back({{"role", "assistant"}, {"content", response}});
    return tokenizer_->encode(chat_->render(conversation, /*add_generation_prompt=*/false));
  }
  std::string text;
  for (const json& m : messages) text += m.value("content", "");
  std::vector<int64_t> ids;
  if (tokenizer_->add_bos()) ids.push_back(tokenizer_->bos_id());
  for (int64_t id : tokenizer_->encode(text + response)) ids.push_back(id);
  return ids;
}

bool RewardModelFolder::reads_policy_ids(const std::string& policy_tokenizer,
                                         const std::string* policy_chat_template) const {
  if (policy_chat_template && *policy_chat_template != tokenizer_->chat_template()) return false;
  const fs::path policy_json =
      fs::is_directory(policy_tokenizer) ? fs::path(policy_tokenizer) / "tokenizer.json" : fs::path(policy_tokenizer);
  if (!fs::is_regular_file(policy_json)) return policy_tokenizer == "char" && char_tokens_;
  return read_regular_file(policy_json.string()) == read_regular_file((fs::path(dir_) / "tokenizer.json").string());
}

PaddedRows pad_rows_left(const std::vector<std::vector<int64_t>>& rows, size_t begin, size_t end) {
  size_t width = 1;
  for (size_t i = begin; i < end; ++i) width = std::max(width, rows[i].size());
  const int64_t B = static_cast<int64_t>(end - begin), T = static_cast<int64_t>(width);
  PaddedRows out{torch::zeros({B, T}, torch::kLong), torch::zeros({B, T}, torch::kLong)};
  for (size_t i = begin; i < end; ++i) {
    const int64_t n = static_cast<int64_t>(rows[i].size()), b = static_cast<int64_t>(i - begin);
    if (n == 0) continue;
    out.ids[b].narrow(0, T - n, n).copy_(torch::tensor(rows[i], torch::kLong));
    out.mask[b].narrow(0, T - n, n).fill_(1);
  }
  return out;
}

}  // namespace ppo
