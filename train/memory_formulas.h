// The memory planner's terms (train/memory_plan.h): a model's shape in the quantities its formulas use, how ZeRO
// divides its parameters over ranks, and the bytes per token its forwards, backwards and generation hold, read off
// model/transformer.cpp, model/attention.cpp and rollout/. Sizes are doubles (bytes); per-token constants count
// elements of model.dtype (b bytes) unless they say float32 (4 bytes: attention scores, log-softmax over the
// vocabulary).
#pragma once

#include <cstdint>

#include "common/config.h"

namespace ppo::memory {

// The model's shape in the quantities the formulas use.
struct Shape {
  double D, I, H, Q, kv, Dh, L, V;  // width, SwiGLU width, query heads, query width (H·Dh), key/value width
                                    // (H_kv·Dh), head dim, layers, V
  double b;                         // bytes per element of model.dtype
  bool sdpa;                        // attention without materialised scores (model.attn_implementation resolved)
  double layer_params;              // one decoder layer
  double root_params;               // embeddings + final norm + untied LM head (the critic adds its value head)
  double max_tensor;                // the largest parameter tensor (the optimizer's per-tensor temporaries)
};

Shape shape_of(const ModelConfig& m, int64_t vocab_size);

// ---- ZeRO: how a model's parameters divide over W ranks ----
// Units: one per decoder layer and one root unit (embeddings, final norm, LM head or value head); each unit's flat
// buffer is padded to a multiple of W and rank r owns slice r.
double padded_slice(double n, double W);

struct Units {
  double layer, root;  // parameters of a decoder layer, of the root unit
  double L;
  double max_tensor;  // the largest parameter tensor (the optimizer's per-tensor temporaries)
  double total() const { return root + L * layer; }
  double slice(double W) const { return padded_slice(root, W) + L * padded_slice(layer, W); }
};

// ---- activations: bytes per token, read off model/transformer.cpp, model/attention.cpp and rollout/ ----
// T is the number of keys each query attends to (the sequence length).

// What one decoder layer saves for backward, per token: the two RMSNorms' input, normalised value and output
// (6D), q and k with the rotary products' operands (3Q + 3kv: the reshaped q of the grouped matmul, the rotated
// and rolled halves), v (kv), the attention output before o_proj (Q), SwiGLU's gate, silu(gate), up and their
// product (4I); eager attention adds the softmax weights (float32, H·T; a half-precision copy too).
double layer_saved(const Shape& s, double T);

// The backward's temporaries while one layer's saved tensors still exist: gradients of SwiGLU's intermediates and
// of the residual stream; eager attention adds the gradient of the softmax (float32, H·T).
double layer_backward_work(const Shape& s, double T);

// Per token, what every forward holds besides the layers: the additive mask (float32) and its boolean helpers,
// T each, and the rotary tables (cos, sin).
double forward_inputs(const Shape& s, double T);

// The no-grad forward's largest moment inside one layer, per token: the residual stream, the normalised input,
// then either attention (q/k/v, rotated copies, float32 scores and weights) or SwiGLU (gate, silu, up, product
// alive together: `down(silu(gate(x)) * up(x))` keeps its temporaries until down returns). `fused` = generation's
// prefill, whose gate and up are one matmul done in place.
double layer_no_grad_work(const Shape& s, double T, bool fused);

// The LM head of a no-grad log-prob forward, per response token: logits (model.dtype), scaled float32 logits and
// logsumexp's exponentials.
double head_no_grad_work(const Shape& s);

// The LM head of a training forward, per response token: saved are the scaled float32 logits, the entropy's
// softmax and the gathered hidden states; the backward adds about three float32 [V] gradients at once.
double head_saved(const Shape& s);
double head_backward_work(const Shape& s);

// Sampling one token per slot on the ATen path (decode/sampling.cpp `sample`; the CPU's loop needs less): the logits
// divided by the temperature, log-softmax and exponentials, the float64 probabilities and their cumulative sum, a
// boolean comparison: per slot.
double sampling_work(const Shape& s);

// The decode step's buffers, alive through a generation (TransformerImpl::decode_buffers, rollout's logits), per slot:
// the residual stream (model.dtype); in the compute dtype (`cb` bytes) the norm's output, q/k/v, attention's output,
// gate/up and their product, o's and down's product where the residual's dtype differs, and the logits; the logits'
// float32 copy where they are not float32.
double decode_buffer_work(const Shape& s, double cb);

}  // namespace ppo::memory
