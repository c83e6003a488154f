// ZeRO's hook into the decoder-layer loop, and gradient checkpointing of one layer: the LayerShards interface that
// workers/sharding.h implements (it sits above model/, so the model sees it only through this interface), and the
// checkpointed layer whose backward recomputes it, gathering and reducing through that interface.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace ppo {

// ZeRO for the decoder layers (workers/sharding.h implements it). At stage 3 a layer's parameters exist whole only
// between gather(layer) and release(layer): the forward gathers, runs the layer without autograd and releases, and
// the backward gathers again, recomputes the layer with autograd (as gradient checkpointing does) and hands the
// layer's parameter gradients (in their .grad) to reduce_gradients(layer) before releasing. At stage 2 with gradient
// checkpointing only the reduction applies: the layer's gradients leave as soon as its backward has computed them.
struct LayerShards {
  virtual ~LayerShards() = default;
  // Whether forwards gather each layer (stage 3, and the model is not gathered whole for generation right now).
  virtual bool gathers_layers() const = 0;
  // Whether a training forward reduces each layer's gradients inside its backward (stage 3, or stage 2 with
  // gradient checkpointing).
  virtual bool reduces_in_backward() const = 0;
  virtual void gather(int64_t layer) = 0;
  virtual void release(int64_t layer) = 0;
  virtual void reduce_gradients(int64_t layer) = 0;
};

// Where a model built for ZeRO-3 goes unit by unit (workers/sharding.h's ShardedBuild implements it): the
// Transformer hands over each decoder layer ("model.layers.<i>") as soon as it is built and initialised, and the
// head hands over the rest ("root": embeddings, final norm, head) once the model is complete. `take` may leave the
// unit's parameters without storage, so that no rank holds more than one unit whole while a model is built.
struct UnitSink {
  virtual ~UnitSink() = default;
  // The ranks the model is sharded over (what each rank will hold: about 1 / shards of it).
  virtual int64_t shards() const = 0;
  // The unit's parameters by their full names, in the model's order.
  virtual void take(const std::string& unit, const std::vector<std::pair<std::string, torch::Tensor>>& params) = 0;
};

// One decoder layer that stores only its input for backward (the reentrant scheme of torch.utils.checkpoint):
// `layer` runs the layer (number `index`) on its input, without autograd in the forward, and again with autograd in
// the backward, under the forward's `autocast_dtype` and, where it draws random numbers (`draws_random`: dropout),
// the forward's random state. With `shards` the layer's gradients are reduced right after its backward, and, where
// the shards gather layers, its parameters are gathered for the forward and for the recomputation. Without grad mode
// it is the plain layer.
torch::Tensor checkpointed_layer(std::function<torch::Tensor(const torch::Tensor&)> layer, int64_t index,
                                 LayerShards* shards, const torch::Tensor& hidden, bool draws_random,
                                 const std::string& autocast_dtype);

}  // namespace ppo
