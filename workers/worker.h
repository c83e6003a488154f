// What the actor and the critic share: where the model's parameters live (offload), its optimizer, and the files of
// its state in a checkpoint.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <map>
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

// What a LoRA model's checkpoint records beside its adapters (in the header of <role>_lora.safetensors), and what
// loading one checks: the adapters' settings and the identity of the frozen base they were trained on. A base is
// identified by the size and XXH3 checksum of each file it was read from (model.path's weight files, or the whole
// checkpoint <role>.pt it started from), or by model.seed and model.init_std when it is the seeded initialisation.
struct LoraRecord {
  std::string role;  // actor | critic: the config section, for messages
  LoraConfig lora;
  std::string base_source;                     // where the base came from, for messages
  std::string base_checkpoint;                 // the checkpoint file <role>.pt it came from; empty: model.path or seed
  std::map<std::string, std::string> base_id;  // file name -> "<bytes> bytes, xxh3 <hex>" (or model.seed, init_std)
};

// The record of a `role` model whose base comes from `checkpoint_file` when set, else from config.path, else the
// seeded initialisation.
LoraRecord lora_record(const ModelConfig& config, const LoraConfig& lora, const std::string& role,
                       const std::string& checkpoint_file);
// The base checkpoint file the adapters file `adapters` records, when that file is still there with the recorded
// size and checksum (a LoRA run started from a whole checkpoint, such as an SFT run's); empty otherwise.
std::string recorded_base_checkpoint(const std::string& adapters);

// The weights file a `role` model starts from in checkpoint folder `dir`: <dir>/<role>.pt (or .safetensors); for a
// value model whose folder has none, the policy's (actor.pt: an SFT run's), when it is there.
std::string initial_weights_file(const std::string& dir, const std::string& role, bool is_value_model);
// Whether `file` holds a policy's weights (actor.pt, actor.safetensors).
bool is_policy_weights(const std::string& file);
// The backbone of a policy's checkpoint file into `backbone` (a value model's, whose head keeps its seeded init).
void load_policy_backbone(TransformerImpl& backbone, const std::string& file, const ModelConfig& config,
                          int64_t vocab_size);

// A worker's model with its initial weights: <init_checkpoint>/<file> when init_checkpoint is set (actor.pt,
// critic.pt; a value model from a folder with actor.pt alone, an SFT run's, takes that policy's backbone; a LoRA
// checkpoint holds only adapters, <role>_lora.safetensors: the base then comes from model.path or the seeded
// initialisation), else model.path (a value model keeps its seeded value head when the folder has none),
// else the seeded initialisation. With `lora` (rank > 0) the model gets adapters (model/lora.h), from the checkpoint
// when it has them (which must record these settings and this base; a base that was a whole checkpoint is read
// from it again while it is unchanged), else from `lora_path` (a PEFT folder) when set,
// else PEFT's initialisation; `record` (when given) receives the LoRA record of the model. Model: CausalLM or
// ValueModel; `role` is "actor" or "critic" (the config section, for messages). With `sharded` (sharded_build's) the
// model goes there unit by unit as it is built, and its weights are read there: it is left without storage.
template <class Model>
Model initial_model(const ModelConfig& config, int64_t vocab_size, const std::string& init_checkpoint,
                    const std::string& role, bool is_value_model, const LoraConfig& lora,
                    const std::string& lora_path = "", LoraRecord* record = nullptr, ShardedBuild* sharded = nullptr) {
  check_lora_fits_memory(config, vocab_size, lora, role + ".lora");  // before the base is built
  if (sharded) return Model(config, vocab_size, sharded);
  Model model(config, vocab_size);
  const std::string adapters = init_checkpoint.empty() ? "" : init_checkpoint + "/" + role + "_lora.safetensors";
  const bool from_adapters = !adapters.empty() && std::filesystem::exists(adapters);
  const std::string base_file = from_adapters             ? recorded_base_checkpoint(adapters)
                                : init_checkpoint.empty() ? ""
                                                          : initial_weights_file(init_checkpoint, role, is_value_model);
  if (is_value_model && is_policy_weights(base_file))
    load_policy_backbone(*model->model, base_file, config, vocab_size);
  else
    load_initial_weights(*model, base_file, config.path, is_value_model);
  add_lora(*model->model, lora, role + ".lora", config.seed);
  usage_check(lora.rank > 0 || !from_adapters, adapters + " holds LoRA adapters: set " + role +
                                                   ".lora.rank (and its alpha and target_modules) as the run that "
                                                   "wrote it");
  usage_check(lora.rank > 0 || lora_path.empty(), "model.lora_path needs " + role + ".lora.rank > 0 (the adapter's r)");
  if (lora.rank == 0) return model;
  LoraRecord made = lora_record(config, lora, role, base_file);
  if (from_adapters) {
    load_trainable_tensors(*model, adapters, &made);
  } else if (!lora_path.empty()) {
    load_peft_adapter(*model, lora, lora_path);
  }
  if (record) *record = std::move(made);
  return model;
}

// The build of a model that starts at ZeRO stage 3 (`zero_stage` 3; workers/sharding.h): its slices taken from the
// seeded initialisation, or read from model.path's folder a part at a time, so that no rank holds the whole model.
// Null where the model is built whole and sliced after: below stage 3, with LoRA (its frozen base stays whole), and
// from a ppo.cpp checkpoint (`init_checkpoint`'s <role>.pt, an archive that is read whole).
std::unique_ptr<ShardedBuild> sharded_build(const ModelConfig& config, int64_t zero_stage, const LoraConfig& lora,
                                            const std::string& init_checkpoint, bool is_value_model);

// The parameters a LoRA model trains: its adapters and a value head; the rest is its frozen base.
bool trains_with_lora(const std::string& name);
// <role>_lora.safetensors: the trained tensors of a LoRA model by name (adapters, a value head), with `record` in
// the header.
void save_trainable_tensors(const torch::nn::Module& module, const std::string& path, const LoraRecord& record);
// Reads them back. A tensor missing, of another shape, or one the model does not train (adapters of other target
// modules), and a file whose recorded settings or base differ from `expected` (a file written before they were
// recorded is not compared), is a UsageError naming the file and what differs.
void load_trainable_tensors(torch::nn::Module& module, const std::string& path, const LoraRecord* expected);

class WorkerState {
 public:
  // `model` with its initial weights, `backbone` its Transformer. `optim` null: a frozen model (the reference policy):
  // no optimizer, parameters without gradients. A model with LoRA adapters trains only them (and a value head): its
  // base is frozen, with neither gradients nor optimizer state. `zero_stage` (parallel.zero_stage): 1-3 shard the
  // trained state over the ranks (workers/sharding.h; with LoRA the adapters', the frozen base stays whole); a
  // frozen model is sharded at stage 3 only. `built`: the model's sharded build (stage 3), whose slices it starts from.
  WorkerState(torch::nn::Module& model, TransformerImpl& backbone, torch::Device device, const OffloadConfig& offload,
              const OptimConfig* optim, double grad_clip, int64_t total_optimizer_steps, int64_t zero_stage,
              std::unique_ptr<ShardedBuild> built = nullptr);

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

  // Before a training phase: the device's default generator, which LoRA's dropout draws from, seeded from `seed`
  // (trainer.seed), the optimizer steps taken and the rank, so that a run and its resumption draw the same masks
  // whatever ran before. No-op without dropout.
  void seed_dropout(int64_t seed);
  // A LoRA model's record, written with its adapters and checked when they are loaded (initial_model makes it).
  void set_lora_record(const LoraRecord& record) { lora_record_ = record; }

  // Collective: dir/<name>.pt (rank 0; with LoRA dir/<name>_lora.safetensors, the trained tensors only; at stage 3
  // without LoRA dir/<name>.safetensors, written a gathered unit at a time), and dir/<name>_optim.pt (rank 0) or its
  // sharded parts (every rank).
  void save(const torch::nn::Module& module, const std::string& dir, const std::string& name) const;
  // Collective at stage 3, where each rank reads only its slices of <name>.safetensors (a .pt is read whole and
  // sliced). The weights and the optimizer state may have been written by any number of ranks, sharded or not.
  void load(torch::nn::Module& module, const std::string& dir, const std::string& name, bool with_optimizer);
  // Collective: throws when the parameters differ between ranks (stage 3: the gathered parameters).
  void check_identical(Context& context, const std::string& what);

 private:
  bool sliced_weights() const;  // stage 3 holding the whole model: weights saved and loaded a slice at a time
  torch::nn::Module& module_;
  torch::Device device_;
  bool trainable_;
  bool lora_;     // the model has adapters: only they (and a value head) are trained and saved
  bool dropout_;  // and they have dropout
  LoraRecord lora_record_;
  int64_t parameter_count_ = 0, trained_count_ = 0;
  int64_t gathered_bytes_ = 0;
  std::vector<std::string> names_;  // the parameters' names in the order of module.parameters()
  std::unique_ptr<ShardedState> shards_;
  std::unique_ptr<ParamPlacement> placement_;
  std::unique_ptr<Optimizer> optimizer_;  // stage 0
};

}  // namespace ppo
