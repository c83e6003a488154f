// What the actor and the critic share: where the model's parameters live (offload), its optimizer, and the files of
// its state in a checkpoint.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "common/config.h"
#include "model/weights.h"
#include "workers/memory.h"
#include "workers/optimizer.h"

namespace ppo {

// A worker's model with its initial weights: <init_checkpoint>/<file> when init_checkpoint is set (actor.pt,
// critic.pt), else model.path (a value model keeps its seeded value head when the folder has none), else the seeded
// initialisation. Model: CausalLM or ValueModel.
template <class Model>
Model initial_model(const ModelConfig& config, int64_t vocab_size, const std::string& init_checkpoint,
                    const std::string& file, bool is_value_model) {
  Model model(config, vocab_size);
  load_initial_weights(*model, init_checkpoint.empty() ? "" : init_checkpoint + "/" + file, config.path,
                       is_value_model);
  return model;
}

class WorkerState {
 public:
  // `optim` null: a frozen model (the reference policy): no optimizer, parameters without gradients.
  WorkerState(std::vector<torch::Tensor> params, torch::Device device, const OffloadConfig& offload,
              const OptimConfig* optim, double grad_clip, int64_t total_optimizer_steps);

  ParamPlacement& placement() { return *placement_; }
  Optimizer& optimizer();  // throws for a frozen model
  bool trainable() const { return optimizer_ != nullptr; }
  torch::Device device() const { return device_; }

  // dir/<name>.pt, and dir/<name>_optim.pt when trainable.
  void save(const torch::nn::Module& module, const std::string& dir, const std::string& name) const;
  void load(torch::nn::Module& module, const std::string& dir, const std::string& name, bool with_optimizer);

 private:
  torch::Device device_;
  std::unique_ptr<ParamPlacement> placement_;
  std::unique_ptr<Optimizer> optimizer_;
};

}  // namespace ppo
