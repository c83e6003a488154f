// What the actor and the critic share: where the model's parameters live (offload), its optimizer, and the files of
// its state in a checkpoint.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <memory>
#include <string>

#include "common/config.h"
#include "common/error.h"
#include "model/lora.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "parallel/context.h"
#include "workers/memory.h"
#include "workers/optimizer.h"
#include "workers/sharding.h"

namespace ppo {

// A worker's model with its initial weights: <init_checkpoint>/<file> when init_checkpoint is set (actor.pt,
// critic.pt; a LoRA checkpoint holds only adapters, <role>_lora.safetensors: the base then comes from model.path or
// the seeded initialisation), else model.path (a value model keeps its seeded value head when the folder has none),
// else the seeded initialisation. With `lora` (rank > 0) the model gets adapters (model/lora.h), from the checkpoint
// when it has them, else from `lora_path` (a PEFT folder) when set, else PEFT's initialisation. Model: CausalLM or
// ValueModel; `role` is "actor" or "critic" (the config section, for messages).
template <class Model>
Model initial_model(const ModelConfig& config, int64_t vocab_size, const std::string& init_checkpoint,
                    const std::string& role, bool is_value_model, const LoraConfig& lora,
                    const std::string& lora_path = "") {
  Model model(config, vocab_size);
  const std::string adapters = init_checkpoint.empty() ? "" : init_checkpoint + "/" + role + "_lora.safetensors";
  const bool from_adapters = !adapters.empty() && std::filesystem::exists(adapters);
  load_initial_weights(*model, init_checkpoint.empty() || from_adapters ? "" : init_checkpoint + "/" + role + ".pt",
                       config.path, is_value_model);
  add_lora(*model->model, lora, role + ".lora", config.seed);
  if (from_adapters) {
    usage_check(lora.rank > 0, adapters + " holds LoRA adapters: set " + role + ".lora.rank (and its alpha and " +
                                   "target_modules) as the run that wrote it");
    load_trainable_tensors(*model, adapters);
  } else if (!lora_path.empty()) {
    usage_check(lora.rank > 0, "model.lora_path needs " + role + ".lora.rank > 0 (the adapter's r)");
    load_peft_adapter(*model, lora, lora_path);
  }
  return model;
}

// The parameters a LoRA model trains: its adapters and a value head; the rest is its frozen base.
bool trains_with_lora(const std::string& name);
// <role>_lora.safetensors: the trained tensors of a LoRA model by name (adapters, a value head).
void save_trainable_tensors(const torch::nn::Module& module, const std::string& path);
// Reads them back; a tensor missing or of another shape is a UsageError naming the file.
void load_trainable_tensors(torch::nn::Module& module, const std::string& path);

class WorkerState {
 public:
  // `model` with its initial weights, `backbone` its Transformer. `optim` null: a frozen model (the reference policy):
  // no optimizer, parameters without gradients. A model with LoRA adapters trains only them (and a value head): its
  // base is frozen, with neither gradients nor optimizer state. `zero_stage` (parallel.zero_stage): 1-3 shard the
  // trained state over the ranks (workers/sharding.h; with LoRA the adapters', the frozen base stays whole); a
  // frozen model is sharded at stage 3 only.
  WorkerState(torch::nn::Module& model, TransformerImpl& backbone, torch::Device device, const OffloadConfig& offload,
              const OptimConfig* optim, double grad_clip, int64_t total_optimizer_steps, int64_t zero_stage);

  ParamPlacement& placement() { return *placement_; }
  Updater& optimizer();  // throws for a frozen model
  bool trainable() const { return trainable_; }
  torch::Device device() const { return device_; }
  int64_t zero_stage() const { return shards_ ? shards_->stage() : 0; }
  // Scalars in the model's parameters (whole, also when sharded), and in those it trains (with LoRA: the adapters
  // and a value head).
  int64_t parameter_count() const { return parameter_count_; }
  int64_t trained_count() const { return trained_count_; }
  // Parameters + gradients + optimizer state this rank held at the last optimizer step (a frozen model: its
  // parameters).
  int64_t model_state_bytes() const;
  // Stage 3: the bytes of the last whole-model gather (the generation copy); 0 otherwise.
  int64_t gathered_bytes() const { return gathered_bytes_; }

  // The scope of one phase: the parameters on the device (param offload), and at stage 3 the root unit gathered,
  // or with `whole_model` every unit (generation, which needs whole weights: one gather per phase, not per token).
  class Phase {
   public:
    Phase(WorkerState& state, bool whole_model);
    ~Phase();
    Phase(const Phase&) = delete;
    Phase& operator=(const Phase&) = delete;

   private:
    WorkerState& state_;
    OnDevice on_;
    bool whole_;
  };

  // Collective: dir/<name>.pt (rank 0; with LoRA dir/<name>_lora.safetensors, the trained tensors only), and
  // dir/<name>_optim.pt (rank 0) or its sharded parts (every rank).
  void save(const torch::nn::Module& module, const std::string& dir, const std::string& name) const;
  // Collective at stage 3. The optimizer state may have been written by any number of ranks, sharded or not.
  void load(torch::nn::Module& module, const std::string& dir, const std::string& name, bool with_optimizer);
  // Collective: throws when the parameters differ between ranks (stage 3: the gathered parameters).
  void check_identical(Context& context, const std::string& what);

 private:
  torch::nn::Module& module_;
  torch::Device device_;
  bool trainable_;
  bool lora_;  // the model has adapters: only they (and a value head) are trained and saved
  int64_t parameter_count_ = 0, trained_count_ = 0;
  int64_t gathered_bytes_ = 0;
  std::vector<std::string> names_;  // the parameters' names in the order of module.parameters()
  std::unique_ptr<ShardedState> shards_;
  std::unique_ptr<ParamPlacement> placement_;
  std::unique_ptr<Optimizer> optimizer_;  // stage 0
};

}  // namespace ppo
