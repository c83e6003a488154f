#include "model/layer_shards.h"

#include <torch/csrc/autograd/functions/utils.h>

#include <mutex>
#include <optional>

#include "model/autocast.h"

namespace ppo {

namespace {

// The random state dropout (LoRA's) draws from on one device: saved before a checkpointed layer's forward and put
// back for its recomputation, so that both draw the same masks (torch.utils.checkpoint's preserve_rng_state).
struct RngState {
  at::Generator generator;
  torch::Tensor state;

  static RngState of(torch::Device device) {
    at::Generator generator = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(generator.mutex());
    return {generator, generator.get_state()};
  }
  // Runs `f` from this state; the generator's own state is restored after.
  template <class F>
  auto replay(F&& f) {
    torch::Tensor now;
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      now = generator.get_state();
      generator.set_state(state);
    }
    auto result = f();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(now);
    return result;
  }
};

// Backward of a gradient-checkpointed decoder layer (the reentrant scheme of torch.utils.checkpoint): the forward
// ran without autograd and kept only the layer's input; here the layer runs again with autograd on a detached copy
// of that input, and a nested backward with the incoming gradient accumulates the layer's parameter gradients and
// yields the gradient of the input, which flows on to the previous layer. With `shards` (ZeRO, see LayerShards) the
// layer's parameters are gathered for the recomputation and its gradients reduced right after it.
struct CheckpointedLayerBackward : torch::autograd::Node {
  std::function<torch::Tensor(const torch::Tensor&)> layer;  // holds the layer and its AttentionInputs
  int64_t index = 0;
  LayerShards* shards = nullptr;
  bool gather = false;
  torch::Tensor input;  // [B, T, D], detached
  bool input_requires_grad = false;
  std::string autocast_dtype;   // the recomputation runs under the forward's autocast, as torch.utils.checkpoint does
  std::optional<RngState> rng;  // the forward's random state, with dropout

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    TORCH_CHECK(input.defined(), "checkpointed layer: backward through the graph a second time is not supported");
    torch::Tensor x = input.detach().requires_grad_(input_requires_grad);
    if (gather) shards->gather(index);
    torch::Tensor y;
    {
      torch::AutoGradMode enable(true);
      AutocastGuard autocast(autocast_dtype, x.device());
      const auto forward = [&] { return layer(x); };
      y = rng ? rng->replay(forward) : forward();
    }
    if (grads[0].defined() && y.requires_grad()) torch::autograd::backward({y}, {grads[0]});
    torch::Tensor grad_input = input_requires_grad ? x.grad() : torch::Tensor();
    y.reset();
    if (shards) shards->reduce_gradients(index);
    if (gather) shards->release(index);
    release_variables();
    return {grad_input};
  }
  void release_variables() override {
    input.reset();
    layer = nullptr;
    rng.reset();
  }
  std::string name() const override { return "CheckpointedLayerBackward"; }
};

}  // namespace

torch::Tensor checkpointed_layer(std::function<torch::Tensor(const torch::Tensor&)> layer, int64_t index,
                                 LayerShards* shards, const torch::Tensor& hidden, bool draws_random,
                                 const std::string& autocast_dtype) {
  const bool gather = shards && shards->gathers_layers();
  std::optional<RngState> rng;
  if (draws_random) rng = RngState::of(hidden.device());
  torch::Tensor out;
  {
    torch::NoGradGuard no_grad;
    if (gather) shards->gather(index);
    out = layer(hidden);
    if (gather) shards->release(index);
  }
  auto node = std::make_shared<CheckpointedLayerBackward>();
  node->layer = std::move(layer);
  node->index = index;
  node->shards = shards;
  node->gather = gather;
  node->input = hidden.detach();
  node->input_requires_grad = hidden.requires_grad();
  node->autocast_dtype = autocast_dtype;
  node->rng = std::move(rng);
  node->set_next_edges(torch::autograd::collect_next_edges(hidden));
  torch::autograd::set_history(out, node);
  return out;
}

}  // namespace ppo
