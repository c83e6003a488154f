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

// optim.warmup_style: constant, cosine.
const std::vector<std::string>& warmup_style_names();

// The L2 norm of all defined tensors together, as torch.nn.utils.clip_grad_norm_: a fused per-tensor norm
// (float32), then the norm of those in float64, read to the host once.
double global_norm(const std::vector<torch::Tensor>& tensors);

// Learning rate at optimizer step `step` (0-based): linear warmup, then constant or cosine to min_lr_ratio.
double scheduled_lr(const OptimConfig& optim, int64_t step, int64_t total_steps);

// AdamW (decoupled weight decay, Loshchilov & Hutter 2019), the same operations as torch::optim::AdamW, with the
// state placed by OffloadConfig:
//   grad:      after the reduction, gradients move to host memory and leave the device; the update streams them back
//              one tensor at a time (or uses them in place when the optimizer state is on the host too);
//   optimizer: the moments live in host memory and each tensor's update runs there; the new values are copied
//              back into the parameter.
// Gradients are released after every step (set to none, PyTorch's default), so they hold no memory between phases.
class Optimizer {
 public:
  Optimizer(std::vector<torch::Tensor> params, const OptimConfig& optim, double grad_clip, int64_t total_steps,
            const OffloadConfig& offload = {});
  StepResult step(Context& context);  // consumes and releases the accumulated gradients
  void zero_grad();                   // releases the gradients
  void save(const std::string& path) const;
  void load(const std::string& path);  // UsageError naming the file when it is not this optimizer's state
  int64_t steps_taken() const { return steps_taken_; }
  void set_steps_taken(int64_t steps) { steps_taken_ = steps; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  // Bytes of optimizer state (moments) and where they live.
  int64_t state_bytes() const;

 private:
  struct Moments {
    torch::Tensor exp_avg, exp_avg_sq;  // zeros until the first step; on the host with offload.optimizer
    int64_t steps = 0;                  // updates this tensor received (torch's per-parameter "step")
  };
  std::vector<torch::Tensor> gradients();  // after the reduction: on the host with offload.grad
  void update(size_t i, const torch::Tensor& grad, double lr);

  std::vector<torch::Tensor> params_;
  std::vector<Moments> moments_;
  OptimConfig optim_;
  OffloadConfig offload_;
  double grad_clip_;
  int64_t total_steps_;
  int64_t steps_taken_ = 0;
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
  int64_t mini_batches = 1;            // equal parts of this rank's batch, one optimizer step each
  MicroBatchSpec micro;                // micro-batches of a mini-batch: a count or a token budget
  std::string metric_prefix;           // "actor" or "critic"
  int64_t shuffle_seed = -1;           // >= 0: permute the rank's samples per epoch with this seed
  torch::Device device = torch::kCPU;  // where the micro-batches are computed
};

// Returns the loss of one micro-batch, normalised by `denominators` (so it can be summed), and records its metrics.
using MicroLoss = std::function<torch::Tensor(const Batch& micro, const Denominators& denominators, Metrics& metrics)>;

// epochs x mini-batches x micro-batches: backward per micro-batch (gradient accumulation), one reduced optimizer
// step per mini-batch; records <prefix>/grad_norm, <prefix>/lr, <prefix>/skipped_steps.
void run_updates(const Batch& batch, const UpdateSchedule& schedule, Optimizer& optimizer, Context& context,
                 Metrics& metrics, const MicroLoss& micro_loss);

}  // namespace ppo
