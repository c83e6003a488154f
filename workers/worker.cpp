// See workers/worker.h.
#include "workers/worker.h"

#include "model/weights.h"

namespace ppo {

WorkerState::WorkerState(std::vector<torch::Tensor> params, torch::Device device, const OffloadConfig& offload,
                         const OptimConfig* optim, double grad_clip, int64_t total_optimizer_steps)
    : device_(device) {
  placement_ = std::make_unique<ParamPlacement>(params, device_, offload.param);
  if (optim) {
    optimizer_ = std::make_unique<Optimizer>(params, *optim, grad_clip, total_optimizer_steps, offload);
  } else {
    for (auto& p : params) p.set_requires_grad(false);
  }
}

Optimizer& WorkerState::optimizer() {
  TORCH_CHECK(optimizer_, "a frozen model has no optimizer");
  return *optimizer_;
}

void WorkerState::save(const torch::nn::Module& module, const std::string& dir, const std::string& name) const {
  save_module(module, dir + "/" + name + ".pt");
  if (optimizer_) optimizer_->save(dir + "/" + name + "_optim.pt");
}

void WorkerState::load(torch::nn::Module& module, const std::string& dir, const std::string& name,
                       bool with_optimizer) {
  load_module(module, dir + "/" + name + ".pt");
  if (with_optimizer && optimizer_) optimizer_->load(dir + "/" + name + "_optim.pt");
}

}  // namespace ppo
