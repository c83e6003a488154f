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
  bool fused = false;    // the update ran as at::_fused_adamw_ calls (Optimizer: see there)
};

// optim.warmup_style: constant, cosine.
const std::vector<std::string>& warmup_style_names();

// The L2 norm of all defined tensors together, as torch.nn.utils.clip_grad_norm_: a fused per-tensor norm
// (float32), then the norm of those in float64, read to the host once.
double global_norm(const std::vector<torch::Tensor>& tensors);

// Learning rate at optimizer step `step` (0-based): linear warmup, then constant or cosine to min_lr_ratio.
double scheduled_lr(const OptimConfig& optim, int64_t step, int64_t total_steps);

// One AdamW update of `param` in place (decoupled weight decay, Loshchilov & Hutter 2019), operation for operation
// as torch::optim::AdamW::step (torch/csrc/api/src/optim/adamw.cpp), so that results are bit-identical to it.
// `steps` counts this update (1 for the first). All tensors on one device, of one shape.
void adamw_update(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                  int64_t steps, double lr, const OptimConfig& optim);

// Whether this LibTorch has the fused multi-tensor AdamW kernel, at::_fused_adamw_ (what torch.optim.AdamW(fused=True)
// calls), for CPU and CUDA tensors: LibTorch >= 2.4.
bool fused_adamw_available();

// What run_updates drives: the gradient reduction and the update of one worker's model, whole (Optimizer) or sharded
// over the ranks (ShardedState, workers/sharding.h).
class Updater {
 public:
  virtual ~Updater() = default;
  // After each micro-batch's backward (a sharded model reduces its gradients there).
  virtual void after_backward(Context& context) { (void)context; }
  virtual StepResult step(Context& context) = 0;  // consumes and releases the accumulated gradients
  virtual void zero_grad() = 0;                   // releases the gradients
  virtual int64_t steps_taken() const = 0;
  virtual void set_steps_taken(int64_t steps) = 0;
  // Bytes of optimizer state (moments) on this rank.
  virtual int64_t state_bytes() const = 0;
  // Parameters + gradients + optimizer state this rank held at its last step (as allocated; memory/model_state_mib).
  virtual int64_t model_state_bytes() const = 0;
};

// AdamW (decoupled weight decay, Loshchilov & Hutter 2019), the same operations as torch::optim::AdamW, with the
// state placed by OffloadConfig:
//   grad:      after the reduction, gradients move to host memory and leave the device; the update streams them back
//              one tensor at a time (or uses them in place when the optimizer state is on the host too);
//   optimizer: the moments live in host memory and each tensor's update runs there; the new values are copied
//              back into the parameter.
// Gradients are released after every step (set to none, PyTorch's default), so they hold no memory between phases.
// The update runs one of two ways, after the global-norm clip has scaled the gradients:
//   fused:      without offload.grad and offload.optimizer, where fused_adamw_available(): one at::_fused_adamw_ call
//               per device and dtype updates every parameter with a gradient (torch.optim.AdamW(fused=True)); equal
//               to the per-tensor update to float rounding (the kernel orders its arithmetic differently);
//   per tensor: adamw_update for one parameter at a time, bit-identical to torch::optim::AdamW: with either offload,
//               on LibTorch < 2.4, for a parameter the kernel cannot take (not contiguous, no elements), and when
//               set_fused(false) asks for it.
// Either way the per-parameter step counts live on the host (Moments::steps), so a checkpoint is the same file and
// resumes on either path.
class Optimizer final : public Updater {
 public:
  Optimizer(std::vector<torch::Tensor> params, const OptimConfig& optim, double grad_clip, int64_t total_steps,
            const OffloadConfig& offload = {});
  StepResult step(Context& context) override;  // consumes and releases the accumulated gradients
  void zero_grad() override;
  void save(const std::string& path) const;
  // UsageError naming the file when it is not this optimizer's state. `path` is <dir>/<name>_optim.pt; when it is
  // absent and a sharded state (<dir>/<name>_optim.index.json, workers/sharding.h) is there, that is read instead.
  // `names`: the parameters' names, in the order of params() (how a sharded state finds them).
  void load(const std::string& path, const std::vector<std::string>& names = {});
  int64_t steps_taken() const override { return steps_taken_; }
  void set_steps_taken(int64_t steps) override { steps_taken_ = steps; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  int64_t state_bytes() const override;
  int64_t model_state_bytes() const override { return model_state_bytes_; }
  // Whether step may use the fused update (true by default; it still needs fused_adamw_available() and no offload).
  void set_fused(bool fused) { fused_ = fused; }

  struct Moments {
    torch::Tensor exp_avg, exp_avg_sq;  // zeros until the first step; on the host with offload.optimizer
    int64_t steps = 0;                  // updates this tensor received (torch's per-parameter "step")
  };
  // Parameter i's moments; zeros when it has had no update.
  Moments moments(size_t i) const;

 private:
  std::vector<torch::Tensor> gradients();                     // after the reduction: on the host with offload.grad
  Moments& moments_on(size_t i, const torch::Tensor& param);  // created, or moved to param's device
  void update(size_t i, const torch::Tensor& grad, double lr);
  void update_fused(const std::vector<size_t>& group, const std::vector<torch::Tensor>& grads, double lr);

  std::vector<torch::Tensor> params_;
  std::vector<Moments> moments_;
  OptimConfig optim_;
  OffloadConfig offload_;
  double grad_clip_;
  int64_t total_steps_;
  int64_t steps_taken_ = 0;
  int64_t model_state_bytes_ = 0;
  bool fused_ = true;
  void place_moments(size_t i, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq, int64_t steps);
};

}  // namespace ppo
