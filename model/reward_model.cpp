// See model/reward_model.h.
#include "model/reward_model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "common/error.h"
#include "model/safetensors.h"

namespace ppo {

namespace fs = std::filesystem;
using json = nlohmann::json;

torch::Tensor sequence_scores(ValueModel& model, const torch::Tensor& ids, const torch::Tensor& mask,
                              int64_t pad_token_id) {
  torch::NoGradGuard no_grad;
  model->eval();
  const torch::Tensor real = mask.to(torch::kBool);
  const torch::Tensor positions = (mask.to(torch::kLong).cumsum(1) - 1).clamp_min(0);
  const torch::Tensor values = model->forward(ids, positions, mask);  // [B, T] float32
  const torch::Tensor candidates = pad_token_id >= 0 ? real.logical_and(ids.ne(pad_token_id)) : real;
  const torch::Tensor columns = torch::arange(ids.size(1), ids.options().dtype(torch::kLong));
  const torch::Tensor last = (columns * candidates.to(torch::kLong)).argmax(1);
  const torch::Tensor first_real = real.logical_not().sum(1);  // left padding: the first real token's column
  const torch::Tensor picked = torch::where(candidates.any(1), last, first_real);
  return values.gather(1, picked.unsqueeze(1)).squeeze(1);
}

RewardModel::RewardModel(const std::string& dir, const ModelConfig& base)
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
  usage_check(fs::is_regular_file(tokenizer_json),
              dir + ": no tokenizer.json; a reward model is read with its own tokenizer");
  tokenizer_ = make_tokenizer(dir);
  usage_check(tokenizer_->vocab_size() <= info_.config.vocab_size,
              tokenizer_json.string() + ": the tokenizer has " + std::to_string(tokenizer_->vocab_size()) +
                  " tokens, more than the reward model's vocab_size " + std::to_string(info_.config.vocab_size));
  if (!tokenizer_->chat_template().empty()) chat_ = ChatTemplate::from_jinja(tokenizer_->chat_template(), dir);
  model_ = ValueModel(info_.config, info_.config.vocab_size);
  load_hf_weights(*model_, dir, /*allow_missing_value_head=*/false);
  model_->eval();
}

std::vector<int64_t> RewardModel::encode(const json& messages, const std::string& response) const {
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

std::vector<double> RewardModel::score(const std::vector<std::vector<int64_t>>& rows, int64_t micro_batch) {
  usage_check(micro_batch >= 1, "the reward model's micro-batch size must be at least 1");
  std::vector<double> scores;
  for (size_t start = 0; start < rows.size(); start += static_cast<size_t>(micro_batch)) {
    const size_t end = std::min(rows.size(), start + static_cast<size_t>(micro_batch));
    size_t width = 1;
    for (size_t i = start; i < end; ++i) width = std::max(width, rows[i].size());
    const int64_t B = static_cast<int64_t>(end - start), T = static_cast<int64_t>(width);
    torch::Tensor ids = torch::zeros({B, T}, torch::kLong), mask = torch::zeros({B, T}, torch::kLong);
    for (size_t i = start; i < end; ++i) {
      const auto& row = rows[i];
      const int64_t n = static_cast<int64_t>(row.size()), b = static_cast<int64_t>(i - start);
      usage_check(n >= 1, "reward model: row " + std::to_string(i) + " has no tokens");
      usage_check(n <= info_.config.max_position_embeddings, "reward model: row " + std::to_string(i) + " has " +
                                                                 std::to_string(n) +
                                                                 " tokens, more than its max_position_embeddings " +
                                                                 std::to_string(info_.config.max_position_embeddings));
      ids[b].narrow(0, T - n, n).copy_(torch::tensor(row, torch::kLong));
      mask[b].narrow(0, T - n, n).fill_(1);
    }
    const torch::Tensor s = sequence_scores(model_, ids, mask, info_.pad_token_id).to(torch::kDouble).contiguous();
    for (int64_t b = 0; b < B; ++b) {
      const double v = s[b].item<double>();
      usage_check(std::isfinite(v), dir_ + ": the reward model's score of row " + std::to_string(start + b) +
                                        " is not finite (" + std::to_string(v) + ")");
      scores.push_back(v);
    }
  }
  return scores;
}

}  // namespace ppo
