// One optimizer step for a worker (actor or critic): gradients summed over ranks once, global-norm clip, a step
// with a non-finite norm skipped (parameters and optimizer state untouched), AdamW with a warmup/cosine schedule.
#pragma once

#include <torch/torch.h>

#include "common/config.h"
#include "parallel/context.h"

namespace ppo {

struct StepResult {
  double grad_norm = 0;  // before clipping, after the reduction (same on every rank)
  bool skipped = false;  // non-finite norm: nothing changed
  double lr = 0;         // learning rate used
};

// Learning rate at optimizer step `step` (0-based): linear warmup, then constant or cosine to min_lr_ratio.
double scheduled_lr(const OptimConfig& optim, int64_t step, int64_t total_steps);

class Optimizer {
 public:
  Optimizer(std::vector<torch::Tensor> params, const OptimConfig& optim, double grad_clip, int64_t total_steps);
  StepResult step(Context& context);  // consumes and zeroes the accumulated gradients
  void zero_grad();
  void save(const std::string& path);
  void load(const std::string& path);
  int64_t steps_taken() const { return steps_taken_; }
  void set_steps_taken(int64_t steps) { steps_taken_ = steps; }
  const std::vector<torch::Tensor>& params() const { return params_; }

 private:
  std::vector<torch::Tensor> params_;
  OptimConfig optim_;
  double grad_clip_;
  int64_t total_steps_;
  int64_t steps_taken_ = 0;
  torch::optim::AdamW adamw_;
};

}  // namespace ppo

#include "common/batch.h"
#include "rl/metrics.h"

namespace ppo {

// The normalisers of one mini-batch over ALL ranks, so that the per-micro-batch losses, summed over micro-batches
// and ranks, are exactly the mini-batch loss (token-mean divides by tokens, seq-* modes by sequences).
struct Denominators {
  double tokens = 0;         // response tokens of real (non-padding) samples
  double sequences = 0;      // real samples
  bool first_micro = false;  // the first micro-batch of the mini-batch on this rank (to count a mini-batch once)
};

struct UpdateSchedule {
  int64_t epochs = 1;
  int64_t mini_batches = 1;      // equal parts of this rank's batch, one optimizer step each
  int64_t micro_batch_size = 1;  // responses per micro-batch
  std::string metric_prefix;     // "actor" or "critic"
  int64_t shuffle_seed = -1;     // >= 0: permute the rank's samples per epoch with this seed
};

// Returns the loss of one micro-batch, normalised by `denominators` (so it can be summed), and records its metrics.
using MicroLoss = std::function<torch::Tensor(const Batch& micro, const Denominators& denominators, Metrics& metrics)>;

// epochs x mini-batches x micro-batches: backward per micro-batch (gradient accumulation), one reduced optimizer
// step per mini-batch; records <prefix>/grad_norm, <prefix>/lr, <prefix>/skipped_steps.
void run_updates(const Batch& batch, const UpdateSchedule& schedule, Optimizer& optimizer, Context& context,
                 Metrics& metrics, const MicroLoss& micro_loss);

}  // namespace ppo
