// ZeRO (Rajbhandari et al. 2020, arXiv:1910.02054) for one worker's model, parallel.zero_stage 1-3.
//
// The parameters are grouped into units: one per decoder layer ("model.layers.<i>") and one "root" unit for the rest
// (embeddings, final norm, LM or value head). Each unit is one flat buffer in the parameters' order, padded to a
// multiple of the world size W; rank r owns slice r (elements [r S, (r + 1) S), S = padded / W) of every unit.
//   stage 1: every rank keeps the whole parameters and accumulates whole gradients; at the optimizer step each unit's
//            gradient is reduce-scattered, the rank updates its slice with its slice of the AdamW moments, and the
//            updated slices are all-gathered into the parameters.
//   stage 2: as 1, but the gradients are reduce-scattered after every micro-batch's backward (with gradient
//            checkpointing, layer by layer inside the backward), so between micro-batches a rank holds its gradient
//            slice only.
//   stage 3: as 2, and the parameters themselves are sliced: a decoder layer is all-gathered for its forward and
//            released after it, gathered again for its backward (which recomputes the layer, as gradient
//            checkpointing does) and its gradient reduce-scattered right there. The root unit is gathered for a
//            phase (as FSDP keeps its root unit) and the whole model for generation (one gather per rollout, the
//            generation copy). The reference model at stage 3 keeps only its slices (no optimizer).
// The gradient norm is the square root of an all-reduced sum of the slices' squares. The moments (and at stage 3
// the parameter slices) are in the parameters' dtype, as the unsharded optimizer keeps them.
//
// Checkpoints: the weights are written whole by rank 0 (<name>.pt, as unsharded); the optimizer state as one part
// per rank, <name>_optim.<r>-of-<W>.safetensors (each unit's moments of the rank's slice, without padding), and an
// index, <name>_optim.index.json (the world size, a run tag every part repeats, and per unit its parameters' names,
// offsets and shapes and its step count), so that any number of ranks, sharded or not, reads its own ranges.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "model/hf.h"
#include "model/transformer.h"
#include "parallel/context.h"
#include "workers/memory.h"
#include "workers/optimizer.h"
#include "workers/saved_optimizer.h"

namespace ppo {

// One unit's place in ZeRO's flat layout: its parameters in the model's order, their offsets in the flat buffer, the
// buffer's size padded to a multiple of the world size, and what this rank keeps of it.
struct ShardUnit {
  std::string name;                   // "model.layers.<i>" or "root"
  std::vector<torch::Tensor> params;  // the module's parameter tensors (their identity is kept)
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> offsets;
  int64_t numel = 0, padded = 0;
  torch::Tensor slice;                // stage 3: this rank's parameter slice [S]
  torch::Tensor gathered;             // stage 3: the whole flat buffer while gathered
  torch::Tensor grad;                 // this rank's gradient slice [S] (stage >= 2 between micro-batches)
  torch::Tensor exp_avg, exp_avg_sq;  // [S]
  int64_t steps = 0;
};

// A model built straight into its ZeRO-3 slices (model/layer_shards.h's UnitSink): as the model hands over each
// unit, this rank keeps its slice of it and the unit's parameters give up their storage, so that no rank holds
// more than one unit whole. The slice is read from a Hugging Face folder a part at a time (`hf`, model.path), or
// taken from the unit's own seeded initial values (no `hf`): the same numbers as a whole model sliced.
class ShardedBuild final : public UnitSink {
 public:
  ShardedBuild(int64_t world, int64_t rank, std::unique_ptr<HfWeightParts> hf);
  int64_t shards() const override { return world_; }
  void take(const std::string& unit, const std::vector<std::pair<std::string, torch::Tensor>>& params) override;
  // Scalars in the parameter `name` (whole), and in all the units taken.
  int64_t numel(const std::string& name) const;
  int64_t parameter_count() const;

 private:
  friend class ShardedState;
  int64_t world_, rank_;
  std::unique_ptr<HfWeightParts> hf_;
  std::vector<ShardUnit> units_;
};

class ShardedState final : public LayerShards, public Updater {
 public:
  // `model`: a CausalLM or ValueModel with its whole initial weights on `device`, `backbone` its Transformer (which
  // this state attaches itself to). `optim` null: a frozen model (the reference at stage 3), sliced, no optimizer.
  // With an optimizer only the parameters that require gradients are sharded (a LoRA model's adapters and value
  // head; its frozen base stays whole on every rank).
  ShardedState(torch::nn::Module& model, TransformerImpl& backbone, int64_t stage, torch::Device device,
               const OffloadConfig& offload, const OptimConfig* optim, double grad_clip, int64_t total_steps,
               Context& context);
  // Stage 3 from the slices of a sharded build of `model` (whose parameters hold no storage).
  ShardedState(ShardedBuild&& built, torch::nn::Module& model, TransformerImpl& backbone, torch::Device device,
               const OffloadConfig& offload, const OptimConfig* optim, double grad_clip, int64_t total_steps,
               Context& context);
  ~ShardedState() override;
  ShardedState(const ShardedState&) = delete;
  ShardedState& operator=(const ShardedState&) = delete;

  int64_t stage() const { return stage_; }
  // Stage 3: the parameter slices, what param offload moves between host and device; below 3: the parameters.
  std::vector<torch::Tensor> placed_tensors() const;
  // Stage 3: the root unit whole for a phase (its forwards and backwards), and sliced again. No-ops below 3.
  void gather_root();
  void release_root();
  // Stage 3: every unit whole (the generation copy, a checkpoint's weights), and sliced again. No-ops below 3.
  void gather_all();
  void release_all();

  bool gathers_layers() const override { return stage_ == 3 && !whole_; }
  bool reduces_in_backward() const override;
  void gather(int64_t layer) override;
  void release(int64_t layer) override;
  void reduce_gradients(int64_t layer) override;

  void after_backward(Context& context) override;
  StepResult step(Context& context) override;
  void zero_grad() override;
  int64_t steps_taken() const override { return steps_taken_; }
  void set_steps_taken(int64_t steps) override { steps_taken_ = steps; }
  int64_t state_bytes() const override;
  int64_t model_state_bytes() const override { return model_state_bytes_; }
  // Bytes of the parameters this rank holds between phases (stage 3: its slices).
  int64_t parameter_bytes() const;

  // Collective: this rank's part of <dir>/<name>_optim (rank 0 writes the index too, and a tag of this save that
  // every part repeats). The weights are the caller's to write (whole: gather_all at stage 3).
  void save_optimizer(const std::string& dir, const std::string& name);
  // The optimizer state from <dir>/<name>_optim.index.json (any world size) or <dir>/<name>_optim.pt (unsharded).
  void load_optimizer(const std::string& dir, const std::string& name);
  // After the module's parameters were loaded whole (a checkpoint's weights): slice them again (stage 3).
  void reslice();
  // Stage 3. Collective: `fn` sees each unit whole in turn (gathered, then released unless it was gathered before),
  // so that no more than one unit is whole at a time.
  void each_unit_whole(const std::function<void(const ShardUnit&)>& fn);
  // Whether the units hold every parameter of the model (not so with LoRA, whose frozen base stays whole).
  bool holds_whole_model() const { return holds_whole_model_; }
  // Stage 3, holds_whole_model. Collective: the weights into the safetensors file `path`, gathered a unit at a time
  // and written by rank 0, so that no rank holds the whole model.
  void save_weights(const std::string& path);
  // Stage 3, holds_whole_model: this rank's slices from the safetensors file `path` (save_weights', written on any
  // number of ranks), reading only their bytes. Every rank checks every tensor's name and shape first.
  void load_weights(const std::string& path);

 private:
  using Unit = ShardUnit;
  // What both public constructors share: the units as laid out (or built), each parameter's place, the layer hook.
  ShardedState(std::vector<Unit> units, torch::nn::Module& model, TransformerImpl& backbone, int64_t stage,
               torch::Device device, const OffloadConfig& offload, const OptimConfig* optim, double grad_clip,
               int64_t total_steps, Context& context);
  // Each parameter's place, and the layer hook (stage >= 2).
  void index_parameters(torch::nn::Module& model);
  int64_t slice_size(const Unit& u) const { return u.padded / world_; }
  torch::Tensor flat_values(const Unit& u) const;  // the unit's parameters, flat and padded
  void materialize(Unit& u);
  void dematerialize(Unit& u);
  void reduce_unit(Unit& u);
  void update_unit(Unit& u, double lr, double scale);

  std::vector<Unit> units_;                              // the decoder layers in order, then the root unit
  std::vector<std::pair<size_t, size_t>> module_order_;  // (unit, index in it) of each parameter, in module order
  TransformerImpl& backbone_;
  int64_t stage_;
  torch::Device device_;
  OffloadConfig offload_;
  std::unique_ptr<OptimConfig> optim_;
  double grad_clip_;
  int64_t total_steps_;
  Context& context_;
  int world_, rank_;
  bool whole_ = false;  // stage 3: gather_all is in effect
  bool holds_whole_model_ = false;
  int64_t steps_taken_ = 0;
  int64_t model_state_bytes_ = 0;
};

}  // namespace ppo
