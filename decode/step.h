// The decode step: one new token for each of S rows over the static KV cache (KVCache::allocate_static), with the
// fused weights (decode/fused_weights.h), writing buffers allocated once per generation (DecodeBuffers). Float32 on
// the CPU it runs the kernels of decode/kernels.h; elsewhere (and on the CPU when asked, for tests) the same maths as
// ATen ops, which a CUDA graph can capture (decode/step_graphs.h). The network's modules (model/) know nothing of it:
// the step reads their weights and calls their ATen pieces.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "decode/fused_weights.h"
#include "model/attention.h"
#include "model/kv_cache.h"
#include "model/transformer.h"

namespace ppo {

// The decode step's activations for S rows (decode_buffers): allocated once per generation and written in place by
// every step, so that a step reads and writes the same addresses every time. The residual stream is in the
// embedding's dtype, the rest in the compute dtype.
struct DecodeBuffers {
  torch::Tensor hidden;    // [S, D] the residual stream
  torch::Tensor normed;    // [S, D] a norm's output: each projection's input, and the step's result
  torch::Tensor qkv;       // [S, (H + 2 H_kv) Dh] q, k and v of the new position (q and k rotated in place)
  torch::Tensor attended;  // [S, H Dh] attention's output
  torch::Tensor gate_up;   // [S, 2 I]
  torch::Tensor gate, up;  // [S, I] its two halves (views)
  torch::Tensor act;       // [S, I] silu(gate) * up
  torch::Tensor product;   // [S, D] o's and down's output where the compute dtype is not the residual's (autocast)
  // Views of the first `rows` rows (a step on fewer slots).
  DecodeBuffers first(int64_t rows) const;
};
// The buffers of decode_step for `rows` rows of `model`, zeros, on the model's device.
DecodeBuffers decode_buffers(const TransformerImpl& model, int64_t rows);

// One decode step of `model` over a static KV cache: tokens and positions [S] int64, key_bias [S, capacity] the
// additive mask over every position of the cache (0 = attend, mask_value(bias_dtype()) = not), in the model's
// bias_dtype(), with the position being written (cache.write_at) already open, `buffers` the first S rows of
// decode_buffers', `weights` fuse_weights(model)'s. The new position follows every cached one, so no causal mask is
// needed. Writes the new keys and values, leaves write_at and the host's length to the caller, and returns
// buffers.normed: the final-norm hidden states [S, D] in the compute dtype. Every tensor it writes is one of the
// buffers or the cache, in place: the same shapes and addresses every call, and no host synchronisation, so that a
// CUDA graph can capture it. Float32 on the CPU without autograd it runs the kernels of decode/kernels.h and five ATen
// ops per layer, unless `cpu_kernels` is false (tests compare the two paths).
const torch::Tensor& decode_step(TransformerImpl& model, const FusedWeights& weights, const torch::Tensor& tokens,
                                 const torch::Tensor& positions, const torch::Tensor& key_bias, KVCache& cache,
                                 DecodeBuffers& buffers, bool cpu_kernels = true);

}  // namespace ppo
