// The value worker: values of response tokens and the clipped value-loss update (used by the gae estimator); and
// ppo rm's reward model, the same model trained by the Bradley-Terry loss on preference pairs, scored at each
// sequence's last token.
#pragma once

#include <memory>

#include "common/batch.h"
#include "common/config.h"
#include "model/packing.h"
#include "model/transformer.h"
#include "rl/algorithms.h"
#include "rl/metrics.h"
#include "workers/updates.h"
#include "workers/worker.h"

namespace ppo {

class Critic {
 public:
  // The model computes on `device`; critic.offload says where its state waits. `micro_batch_size`: the run's
  // (RunShape's, at most what a rank holds per mini-batch); 0 = critic.ppo_micro_batch_size_per_gpu.
  Critic(const Config& config, int64_t vocab_size, int64_t total_optimizer_steps, torch::Device device = torch::kCPU,
         int64_t micro_batch_size = 0);

  // V(s_t) for each response token t (the value at the position that predicts it), no grad, micro-batched as
  // critic_micro_spec: [B, R] on the host, 0 on padding.
  torch::Tensor compute_values(const Batch& batch);
  // critic.ppo_epochs x mini-batches x micro-batches of the clipped value loss (needs values, returns).
  void update(const Batch& batch, int64_t mini_batches, Context& context, Metrics& metrics);

  // ppo rm. A batch of pairs: rows 2i and 2i + 1 pair i's chosen and rejected sequences (prompt left-padded, response
  // right-padded, field::margins), padding pairs with sample_mask 0 on both rows.
  // Scores [B] on the host, no grad, micro-batched as critic_micro_spec (whole pairs per micro-batch).
  torch::Tensor compute_scores(const Batch& batch);
  // critic.ppo_epochs x mini-batches x micro-batches of -log sigmoid(r_chosen - r_rejected - margin) (+
  // critic.center_rewards_coefficient x (r_chosen + r_rejected)^2), averaged over the mini-batch's pairs on all ranks;
  // records rm/loss, rm/accuracy (r_chosen > r_rejected), rm/margin (r_chosen - r_rejected), rm/chosen_score and
  // rm/rejected_score.
  void update_pairs(const Batch& batch, int64_t mini_batches, Context& context, Metrics& metrics);

  void save(const std::string& dir) const;  // dir/critic.pt, dir/critic_optim.pt
  void load(const std::string& dir, bool with_optimizer);
  ValueModel& model() { return model_; }
  WorkerState& state() { return state_; }
  Updater& optimizer() { return state_.optimizer(); }

 private:
  // Values before each response token [B, R] (0 on padding), with grad when enabled: of `micro` on the device, or
  // of `packed` (then `micro` is not read).
  torch::Tensor response_values(const Batch& micro, const PackedSequences* packed);
  // Scores [b] at each row's last real token (the score head, ValueModelImpl::scores_from_hidden), with grad when
  // enabled; as response_values for `micro` and `packed`.
  torch::Tensor last_token_scores(const Batch& micro, const PackedSequences* packed);
  // `forward` on each micro-batch of `batch` (critic_micro_spec; `micros` receives them), no grad, in eval mode: its
  // results on the host.
  using MicroForward = std::function<torch::Tensor(const Batch& micro, const PackedSequences* packed)>;
  std::vector<torch::Tensor> forward_micro_batches(const Batch& batch, std::vector<MicroBatch>& micros,
                                                   const MicroForward& forward);
  UpdateSchedule update_schedule(int64_t mini_batches, const std::string& metric_prefix);
  const Config& config_;
  int64_t micro_batch_size_;             // the constructor's
  ModelConfig model_config_;             // model.*, or critic.model.path's weights of that shape
  LoraRecord lora_record_;               // made with the model (initial_model), so declared before it
  std::unique_ptr<ShardedBuild> build_;  // stage 3: the model is built into it, and the state starts from it
  ValueModel model_{nullptr};
  WorkerState state_;
  LossAggMode loss_agg_mode_;  // critic.loss_agg_mode, parsed once
};

// The critic's micro-batches (values and updates): a count, or the token budget with critic.use_dynamic_bsz.
// `micro_batch_size`: as the Critic's.
MicroBatchSpec critic_micro_spec(const Config& config, int64_t micro_batch_size = 0);

// The critic's model config: model.*, or critic.model.path's folder's (when set), which must hold a model of
// model.*'s shape and `vocab_size` tokens (UsageError naming the field that differs).
ModelConfig critic_model_config(const Config& config, int64_t vocab_size);

}  // namespace ppo
