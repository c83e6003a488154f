// See workers/worker.h.
#include "workers/worker.h"

#include "model/weights.h"

namespace ppo {

WorkerState::WorkerState(torch::nn::Module& model, TransformerImpl& backbone, torch::Device device,
                         const OffloadConfig& offload, const OptimConfig* optim, double grad_clip,
                         int64_t total_optimizer_steps, int64_t zero_stage)
    : module_(model), device_(device), trainable_(optim != nullptr) {
  std::vector<torch::Tensor> params = model.parameters();
  parameter_count_ = ppo::parameter_count(model);
  for (const auto& item : model.named_parameters()) names_.push_back(item.key());
  if (!optim)
    for (auto& p : params) p.set_requires_grad(false);
  const bool sharded = optim ? zero_stage >= 1 : zero_stage == 3;
  if (sharded && zero_stage == 3) {  // sliced first, so that only the slices are placed
    shards_ = std::make_unique<ShardedState>(model, backbone, zero_stage, device_, offload, optim, grad_clip,
                                             total_optimizer_steps, Context::get());
    placement_ = std::make_unique<ParamPlacement>(shards_->placed_tensors(), device_, offload.param);
    return;
  }
  placement_ = std::make_unique<ParamPlacement>(params, device_, offload.param);
  if (sharded) {
    shards_ = std::make_unique<ShardedState>(model, backbone, zero_stage, device_, offload, optim, grad_clip,
                                             total_optimizer_steps, Context::get());
  } else if (optim) {
    optimizer_ = std::make_unique<Optimizer>(params, *optim, grad_clip, total_optimizer_steps, offload);
  }
}

Updater& WorkerState::optimizer() {
  TORCH_CHECK(trainable_, "a frozen model has no optimizer");
  if (shards_) return *shards_;
  return *optimizer_;
}

int64_t WorkerState::model_state_bytes() const {
  if (trainable_) return shards_ ? shards_->model_state_bytes() : optimizer_->model_state_bytes();
  if (shards_) return shards_->parameter_bytes();
  int64_t bytes = 0;
  for (const auto& p : module_.parameters()) bytes += static_cast<int64_t>(p.nbytes());
  return bytes;
}

WorkerState::Phase::Phase(WorkerState& state, bool whole_model)
    : state_(state), on_(state.placement()), whole_(whole_model) {
  if (!state_.shards_) return;
  if (whole_) {
    state_.shards_->gather_all();
    state_.gathered_bytes_ = 0;
    for (const auto& p : state_.module_.parameters()) state_.gathered_bytes_ += static_cast<int64_t>(p.nbytes());
  } else {
    state_.shards_->gather_root();
  }
}

WorkerState::Phase::~Phase() {
  if (!state_.shards_) return;
  if (whole_) {
    state_.shards_->release_all();
  } else {
    state_.shards_->release_root();
  }
}

void WorkerState::save(const torch::nn::Module& module, const std::string& dir, const std::string& name) const {
  if (shards_) {
    shards_->save(module, dir, name);
    return;
  }
  if (!Context::get().is_root()) return;
  save_module(module, dir + "/" + name + ".pt");
  if (optimizer_) optimizer_->save(dir + "/" + name + "_optim.pt");
}

void WorkerState::load(torch::nn::Module& module, const std::string& dir, const std::string& name,
                       bool with_optimizer) {
  if (shards_) {
    shards_->gather_all();
    load_module(module, dir + "/" + name + ".pt");
    shards_->reslice();
    if (with_optimizer && trainable_) shards_->load_optimizer(dir, name);
    return;
  }
  load_module(module, dir + "/" + name + ".pt");
  if (with_optimizer && optimizer_) optimizer_->load(dir + "/" + name + "_optim.pt", names_);
}

void WorkerState::check_identical(Context& context, const std::string& what) {
  if (shards_) shards_->gather_all();
  check_identical_across_ranks(module_.parameters(), context, what);
  if (shards_) shards_->release_all();
}

}  // namespace ppo
