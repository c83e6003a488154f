// The policy worker: log-probs of responses, the PPO update, the SFT update; also the frozen reference policy.
#pragma once

#include <memory>
#include <optional>
#include <utility>

#include "common/batch.h"
#include "common/config.h"
#include "model/transformer.h"
#include "rl/algorithms.h"
#include "rl/distillation.h"
#include "rl/metrics.h"
#include "rollout/rollout.h"
#include "workers/updates.h"
#include "workers/worker.h"

namespace ppo {

// Routing replay's count: (token, MoE layer) pairs replayed, and those whose router chose other experts, float64
// scalars on the model's device (undefined before a replayed forward), read on the host once per phase.
struct RoutingCount {
  torch::Tensor pairs, differ;
  void add(const torch::Tensor& more_pairs, const torch::Tensor& more_differ) {
    pairs = pairs.defined() ? pairs + more_pairs : more_pairs;
    differ = differ.defined() ? differ + more_differ : more_differ;
  }
};

class Actor {
 public:
  // The trained policy: actor.optim's optimizer, its learning-rate schedule `total_optimizer_steps` long; its state
  // waits where actor.offload says. The model computes on `device`. `micro_batch_size`: the run's (RunShape's, at
  // most what a rank holds per mini-batch); 0 = actor.ppo_micro_batch_size_per_gpu.
  static std::unique_ptr<Actor> policy(const Config& config, int64_t vocab_size, int64_t total_optimizer_steps,
                                       torch::Device device = torch::kCPU, int64_t micro_batch_size = 0);
  // A frozen policy (the KL reference, or a policy only generated from): no optimizer, parameters without gradients;
  // its state waits where ref.offload says. `zero_stage` 3 (a training run's reference): only this rank's slices.
  static std::unique_ptr<Actor> reference(const Config& config, int64_t vocab_size, torch::Device device = torch::kCPU,
                                          int64_t zero_stage = 0);

  CausalLM& model() { return model_; }
  // Where the parameters are and how they are sharded; a WorkerState::Phase(state(), /*whole_model=*/true) scope
  // brings them to the device, whole, for generation (rollout, validation).
  WorkerState& state() { return state_; }
  // Log-probs of batch.responses under the policy, no grad, in micro-batches of `micro`'s sizes (packed when
  // actor.use_remove_padding, whatever micro.packed says): [B, R] on the host, 0 on padding when packed.
  torch::Tensor compute_log_probs(const Batch& batch, const MicroBatchSpec& micro);
  // The same with what `options` asks for besides (not at_ids), each [B, R, ...] on the host: distillation's argmax
  // and the teacher's top tokens.
  TokenLogProbs compute_token_log_probs(const Batch& batch, const MicroBatchSpec& micro, const LogProbOptions& options);
  // The same under the policy's base, its LoRA adapters off: a LoRA actor's reference policy.
  torch::Tensor compute_base_log_probs(const Batch& batch, const MicroBatchSpec& micro);
  bool has_lora() const;  // actor.lora.rank > 0
  // PPO: actor.ppo_epochs x mini-batches x micro-batches (needs old_log_probs, advantages, ref_log_probs when
  // actor.use_kl_loss, and teacher_log_probs with one of distillation's loss modes, whose loss it adds). Records
  // actor/* metrics.
  void update_policy(const Batch& batch, int64_t mini_batches, Context& context, Metrics& metrics);
  // Supervised fine-tuning on the responses (cross-entropy on response tokens only). Records sft/* metrics.
  void update_sft(const Batch& batch, int64_t mini_batches, Context& context, Metrics& metrics);

  void save(const std::string& dir) const;  // dir/actor.pt, dir/actor_optim.pt
  void load(const std::string& dir, bool with_optimizer);
  Updater& optimizer() { return state_.optimizer(); }
  // With actor.router_replay=R3 (an MoE policy): the (real token, MoE layer) pairs the log-prob forwards since the
  // last call replayed, and those whose router would have chosen other experts than the rollout's; then zero.
  RoutingCount take_routing_count() { return std::exchange(routing_count_, RoutingCount{}); }

 private:
  Actor(const Config& config, int64_t vocab_size, bool trainable, int64_t total_optimizer_steps, torch::Device device,
        int64_t zero_stage);
  UpdateSchedule schedule(int64_t epochs, int64_t mini_batches, int64_t shuffle_seed) const;
  // Log-probs (and what `options` asks for) of one micro-batch waiting on the host, computed on the device, packed or
  // padded.
  TokenLogProbs log_probs(const Batch& host_micro, bool packed, double temperature, const LogProbOptions& options);
  bool replays_routing() const { return config_.actor.router_replay == "R3" && model_->model->has_moe(); }
  const Config& config_;
  int64_t micro_batch_size_ = 0;         // Actor::policy's
  LoraRecord lora_record_;               // made with the model (initial_model), so declared before it
  std::unique_ptr<ShardedBuild> build_;  // stage 3: the model is built into it, and the state starts from it
  CausalLM model_{nullptr};
  WorkerState state_;
  // actor.loss_agg_mode, actor.policy_loss.loss_mode and actor.kl_loss_type, parsed once.
  LossAggMode loss_agg_mode_;
  const PolicyLossSpec& policy_loss_;  // actor.policy_loss.loss_mode
  KlEstimator kl_loss_type_;
  std::optional<DistillSpec> distill_loss_;  // a trained actor under one of distillation's loss modes
  RoutingCount routing_count_;               // log_probs' replays since take_routing_count
};

// The actor's micro-batches for updates: a count, or the token budget with actor.use_dynamic_bsz.
// `micro_batch_size`: as Actor::policy's.
MicroBatchSpec actor_micro_spec(const Config& config, int64_t micro_batch_size = 0);

}  // namespace ppo
