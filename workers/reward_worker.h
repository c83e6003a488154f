// The reward model of a run (reward_model.*; model/reward_model.h): a frozen sequence classifier that scores
// sequences in micro-batches, placed as the reference policy is (reward_model.offload.param; at ZeRO stage 3 only
// this rank's slices, built and read from the folder a slice at a time).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "model/reward_model.h"
#include "model/transformer.h"
#include "workers/worker.h"

namespace ppo {

class RewardWorker {
 public:
  // The folder `dir` read and checked (RewardModelFolder), its model built on `device`'s side of the placement;
  // `zero_stage` 3 shards it over the ranks of the current scope (collective).
  RewardWorker(const Config& config, const std::string& dir, torch::Device device, int64_t zero_stage = 0);

  // Scores [B] (float64, on the host) of the sequences `ids` [B, T] with attention mask [B, T] (1 on real tokens,
  // padding on either side), `micro_batch` rows a forward, packed (packed_sequence_scores). At stage 3 every rank calls
  // it with the same B. A non-finite score is a UsageError naming the folder and the row.
  torch::Tensor score(const torch::Tensor& ids, const torch::Tensor& mask, int64_t micro_batch);
  // The same for token-id rows, left-padded a micro-batch at a time.
  std::vector<double> score_rows(const std::vector<std::vector<int64_t>>& rows, int64_t micro_batch);

  const RewardModelFolder& folder() const { return folder_; }
  WorkerState& state() { return state_; }

 private:
  // One micro-batch's scores [b] on the host (rows first_row..): a row without tokens, or longer than the model's
  // max_position_embeddings, or a score that is not finite, is a UsageError naming the row.
  torch::Tensor score_micro(const torch::Tensor& ids, const torch::Tensor& mask, int64_t first_row);

  RewardModelFolder folder_;
  std::unique_ptr<ShardedBuild> build_;  // stage 3: the model is built into it, and the state starts from it
  ValueModel model_{nullptr};
  WorkerState state_;
};

}  // namespace ppo
