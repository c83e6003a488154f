// The value worker: values of response tokens and the clipped value-loss update (used by the gae estimator).
#pragma once

#include <memory>

#include "common/batch.h"
#include "common/config.h"
#include "model/packing.h"
#include "model/transformer.h"
#include "rl/algorithms.h"
#include "rl/metrics.h"
#include "workers/worker.h"

namespace ppo {

class Critic {
 public:
  // The model computes on `device`; critic.offload says where its state waits.
  Critic(const Config& config, int64_t vocab_size, int64_t total_optimizer_steps, torch::Device device = torch::kCPU);

  // V(s_t) for each response token t (the value at the position that predicts it), no grad, micro-batched as
  // critic_micro_spec: [B, R] on the host, 0 on padding.
  torch::Tensor compute_values(const Batch& batch);
  // critic.ppo_epochs x mini-batches x micro-batches of the clipped value loss (needs values, returns).
  void update(const Batch& batch, int64_t mini_batches, Context& context, Metrics& metrics);

  void save(const std::string& dir) const;  // dir/critic.pt, dir/critic_optim.pt
  void load(const std::string& dir, bool with_optimizer);
  ValueModel& model() { return model_; }
  WorkerState& state() { return state_; }
  Updater& optimizer() { return state_.optimizer(); }

 private:
  // Values before each response token [B, R] (0 on padding), with grad when enabled: of `micro` on the device, or
  // of `packed` (then `micro` is not read).
  torch::Tensor response_values(const Batch& micro, const PackedSequences* packed);
  const Config& config_;
  LoraRecord lora_record_;               // made with the model (initial_model), so declared before it
  std::unique_ptr<ShardedBuild> build_;  // stage 3: the model is built into it, and the state starts from it
  ValueModel model_{nullptr};
  WorkerState state_;
  LossAggMode loss_agg_mode_;  // critic.loss_agg_mode, parsed once
};

// The critic's micro-batches (values and updates): a count, or the token budget with critic.use_dynamic_bsz.
MicroBatchSpec critic_micro_spec(const Config& config);

}  // namespace ppo
