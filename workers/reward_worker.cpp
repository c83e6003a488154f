// See workers/reward_worker.h.
#include "workers/reward_worker.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace ppo {

RewardWorker::RewardWorker(const Config& config, const std::string& dir, torch::Device device, int64_t zero_stage)
    : folder_(dir, config.model),
      build_(sharded_build(folder_.model_config(), zero_stage, LoraConfig{}, /*init_checkpoint=*/"",
                           /*is_value_model=*/true)),
      model_(initial_model<ValueModel>(folder_.model_config(), folder_.model_config().vocab_size,
                                       /*init_checkpoint=*/"", "reward_model", /*is_value_model=*/true, LoraConfig{},
                                       /*lora_path=*/"", /*record=*/nullptr, build_.get())),
      state_(*model_, *model_->model, device, config.reward_model.offload, /*optim=*/nullptr, /*grad_clip=*/0,
             /*total_optimizer_steps=*/0, zero_stage, std::move(build_)) {}

torch::Tensor RewardWorker::score_micro(const torch::Tensor& ids, const torch::Tensor& mask, int64_t first_row) {
  const torch::Tensor lengths = mask.sum(1);
  const int64_t limit = folder_.model_config().max_position_embeddings;
  const int64_t shortest = lengths.argmin().item<int64_t>(), longest = lengths.argmax().item<int64_t>();
  const std::string row = folder_.dir() + ": the reward model's input row ";
  usage_check(lengths[shortest].item<int64_t>() >= 1, row + std::to_string(first_row + shortest) + " has no tokens");
  usage_check(lengths[longest].item<int64_t>() <= limit,
              row + std::to_string(first_row + longest) + " has " + std::to_string(lengths[longest].item<int64_t>()) +
                  " tokens, more than its max_position_embeddings " + std::to_string(limit));
  const torch::Device device = state_.device();
  const torch::Tensor s = packed_sequence_scores(model_, ids.to(device), mask.to(device), folder_.info().pad_token_id)
                              .to(torch::kCPU, torch::kDouble)
                              .contiguous();
  const double* v = s.data_ptr<double>();
  for (int64_t b = 0; b < s.size(0); ++b)
    usage_check(std::isfinite(v[b]), folder_.dir() + ": the reward model's score of row " +
                                         std::to_string(first_row + b) + " is not finite (" + std::to_string(v[b]) +
                                         ")");
  return s;
}

torch::Tensor RewardWorker::score(const torch::Tensor& ids, const torch::Tensor& mask, int64_t micro_batch) {
  TORCH_CHECK(micro_batch >= 1, "RewardWorker: a micro-batch of ", micro_batch, " rows");
  WorkerState::Phase phase(state_, /*whole_model=*/false);
  std::vector<torch::Tensor> parts;
  for (int64_t start = 0; start < ids.size(0); start += micro_batch) {
    const int64_t rows = std::min(micro_batch, ids.size(0) - start);
    parts.push_back(score_micro(ids.narrow(0, start, rows), mask.narrow(0, start, rows), start));
  }
  return parts.empty() ? torch::zeros({0}, torch::kDouble) : torch::cat(parts);
}

std::vector<double> RewardWorker::score_rows(const std::vector<std::vector<int64_t>>& rows, int64_t micro_batch) {
  TORCH_CHECK(micro_batch >= 1, "RewardWorker: a micro-batch of ", micro_batch, " rows");
  WorkerState::Phase phase(state_, /*whole_model=*/false);
  std::vector<double> scores;
  for (size_t start = 0; start < rows.size(); start += static_cast<size_t>(micro_batch)) {
    const size_t end = std::min(rows.size(), start + static_cast<size_t>(micro_batch));
    const PaddedRows padded = pad_rows_left(rows, start, end);
    const torch::Tensor s = score_micro(padded.ids, padded.mask, static_cast<int64_t>(start));
    scores.insert(scores.end(), s.data_ptr<double>(), s.data_ptr<double>() + s.numel());
  }
  return scores;
}

}  // namespace ppo
