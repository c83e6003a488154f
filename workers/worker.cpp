// See workers/worker.h.
#include "workers/worker.h"

#include "common/files.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace ppo {

WorkerState::WorkerState(torch::nn::Module& model, TransformerImpl& backbone, torch::Device device,
                         const OffloadConfig& offload, const OptimConfig* optim, double grad_clip,
                         int64_t total_optimizer_steps, int64_t zero_stage)
    : module_(model), device_(device), trainable_(optim != nullptr), lora_(has_lora(backbone)) {
  std::vector<torch::Tensor> params = model.parameters(), trained;
  parameter_count_ = ppo::parameter_count(model);
  for (const auto& item : model.named_parameters()) {
    const bool trains = optim && (!lora_ || trains_with_lora(item.key()));
    item.value().set_requires_grad(trains);
    if (trains) {
      trained.push_back(item.value());
      names_.push_back(item.key());
      trained_count_ += item.value().numel();
    }
  }
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
    optimizer_ = std::make_unique<Optimizer>(trained, *optim, grad_clip, total_optimizer_steps, offload);
  }
}

Updater& WorkerState::optimizer() {
  TORCH_CHECK(trainable_, "a frozen model has no optimizer");
  if (shards_) return *shards_;
  return *optimizer_;
}

int64_t WorkerState::model_state_bytes() const {
  if (trainable_) {  // the trained state, and a LoRA model's frozen base
    int64_t frozen = 0;
    for (const auto& p : module_.parameters())
      if (!p.requires_grad()) frozen += static_cast<int64_t>(p.nbytes());
    return frozen + (shards_ ? shards_->model_state_bytes() : optimizer_->model_state_bytes());
  }
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
  const bool root = Context::get().is_root();
  if (shards_) shards_->gather_all();  // stage 3: the weights are written whole
  if (root && lora_) {
    save_trainable_tensors(module, dir + "/" + name + "_lora.safetensors");
  } else if (root) {
    save_module(module, dir + "/" + name + ".pt");
  }
  if (shards_) {
    shards_->release_all();
    shards_->save_optimizer(dir, name);
  } else if (root && optimizer_) {
    optimizer_->save(dir + "/" + name + "_optim.pt");
  }
}

void WorkerState::load(torch::nn::Module& module, const std::string& dir, const std::string& name,
                       bool with_optimizer) {
  if (shards_) shards_->gather_all();
  if (lora_) {
    const std::string adapters = dir + "/" + name + "_lora.safetensors";
    usage_check(std::filesystem::exists(adapters),
                adapters + " not found: " + dir + " was saved without " + name + ".lora (" + name +
                    ".pt holds whole weights); resume it without LoRA, or start a LoRA run from it with " + name +
                    ".init_checkpoint=" + dir);
    load_trainable_tensors(module, adapters);
  } else {
    load_module(module, dir + "/" + name + ".pt");
  }
  if (shards_) {
    shards_->reslice();
    if (with_optimizer && trainable_) shards_->load_optimizer(dir, name);
  } else if (with_optimizer && optimizer_) {
    optimizer_->load(dir + "/" + name + "_optim.pt", names_);
  }
}

bool trains_with_lora(const std::string& name) {
  return is_lora_parameter(name) || name.rfind("value_head.", 0) == 0;
}

void save_trainable_tensors(const torch::nn::Module& module, const std::string& path) {
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : module.named_parameters())
    if (trains_with_lora(item.key())) tensors[item.key()] = item.value().detach();
  save_safetensors(path, tensors, {{"format", "ppo.cpp LoRA adapters"}});
}

void load_trainable_tensors(torch::nn::Module& module, const std::string& path) {
  check_regular_file(path);
  verify_manifest_entry(path);
  const std::map<std::string, torch::Tensor> tensors = load_safetensors(path);
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters()) {
    if (!trains_with_lora(item.key())) continue;
    const auto it = tensors.find(item.key());
    usage_check(it != tensors.end(), path + ": no tensor " + item.key() +
                                         " (the adapters of another actor.lora / critic.lora: rank, target_modules)");
    usage_check(it->second.sizes() == item.value().sizes(),
                path + ": " + item.key() + " has shape " + c10::str(it->second.sizes()) + ", this model's " +
                    c10::str(item.value().sizes()) + " (another lora rank or model shape)");
    item.value().copy_(it->second.to(item.value().scalar_type()));
  }
}

void WorkerState::check_identical(Context& context, const std::string& what) {
  if (shards_) shards_->gather_all();
  check_identical_across_ranks(module_.parameters(), context, what);
  if (shards_) shards_->release_all();
}

}  // namespace ppo
