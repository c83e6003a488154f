// The decode step's kernels (the model's side of TransformerImpl::forward_step): float32 loops on the CPU that run
// without autograd straight on tensors' memory, with no ATen op inside (no dispatch, no allocation): RMSNorm of rows,
// rotary on a step's new q and k heads with its new key and value stored into the static cache, and attention of
// one query per row over the cache. Each loop is vectorised by the compiler for AVX-512, AVX2 and
// baseline x86-64 and picked at load time. Other devices and dtypes run the same maths as ATen ops.
// Also what the step runs over: the fused projection weights of no-grad decoding and the step's activation buffers.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "model/packed_gemm.h"

namespace ppo {

// One projection for no-grad decoding, x w (+ bias), in the dtype the matmuls run in (compute_dtype: the autocast
// dtype when model.autocast_dtype is set, else model.dtype), with w held as the [in, out] operand of x w: float32 on
// the CPU packed once (model/packed_gemm.h: each product then streams it with no per-call packing), elsewhere the
// transpose of the [out, in] weight (a view; o's and down's the module's own tensor when nothing merges or casts).
struct FusedProjection {
  PackedWeight packed;    // float32 on the CPU
  torch::Tensor operand;  // [in, out] elsewhere (undefined when packed)
  torch::Tensor bias;     // [out], undefined without one
  int64_t out_features() const { return packed.panels.defined() ? packed.cols : operand.size(1); }
  // x [..., in] -> [..., out].
  torch::Tensor operator()(const torch::Tensor& x) const;
  // out [S, out] = x w (+ bias), or with `accumulate` out += x w (+ bias): x [S, in] and out in the compute dtype,
  // written in place (packed: with no ATen op).
  void into(const torch::Tensor& x, const torch::Tensor& out, bool accumulate) const;
};
// The projection of `weight` [out, in] (+ `bias` [out], may be undefined) in `dtype`.
FusedProjection fuse_projection(const torch::Tensor& weight, const torch::Tensor& bias, torch::ScalarType dtype);

// The projections of one decoder layer for no-grad decoding, LoRA's adapters merged in: [q; k; v] and [gate; up]
// stacked along the output dimension, so that a decode step runs one matmul where the modules run three (and two).
// Built once per generation (TransformerImpl::fused_weights; the weights do not change inside one), so that no step
// casts or packs a weight.
struct FusedLayerWeights {
  FusedProjection qkv;      // D -> (H + 2 H_kv) Dh, with the biases of model.attention_bias
  FusedProjection o;        // H Dh -> D
  FusedProjection gate_up;  // D -> 2 I
  FusedProjection down;     // I -> D
};
using FusedWeights = std::shared_ptr<const std::vector<FusedLayerWeights>>;

// The decode step's activations for S rows (TransformerImpl::decode_buffers): allocated once per generation and
// written in place by every step, so that a step reads and writes the same addresses every time. The residual stream
// is in the embedding's dtype, the rest in the compute dtype.
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

// Whether the decode step's CPU kernels apply: every tensor is float32 on the CPU and autograd is off.
bool decode_kernels_apply(const torch::Tensor& activations, const torch::Tensor& cache_keys);

// Where a decode step's attention reads and writes: query q[s, g * n_rep + r] for row s, kv head g and its r-th
// query head at q + s * q_row + (g * n_rep + r) * Dh (heads contiguous within a row), keys and values [S', H_kv, C,
// Dh] with contiguous rows (row s of the step is row s of the cache), bias [S, C] float32 additive mask, out [S, H Dh]
// contiguous.
struct DecodeAttention {
  const float* q;
  int64_t q_row;
  torch::Tensor keys, values, bias;
  float* out;
  int64_t rows, kv_heads, n_rep, head_dim;
};
// softmax(q k^T / sqrt(Dh) + bias) v over the first `count` keys of every row, without materialising the scores.
void decode_attention_cpu(const DecodeAttention& a, int64_t count);

// Rotary on the q and k heads of qkv [S, (H + 2 H_kv) Dh] (float32, contiguous rows) in place, row s at position
// positions[s] of the tables cos and sin' [N, Dh] (AttentionInputs' convention: rotate_half's sign in sin'), then each
// row's rotated k heads and its v heads stored at position `at` of keys and values [S', H_kv, C, Dh].
void rotate_and_store_cpu(const torch::Tensor& qkv, int64_t heads, int64_t kv_heads, const torch::Tensor& cos,
                          const torch::Tensor& sin, const torch::Tensor& positions, const torch::Tensor& keys,
                          const torch::Tensor& values, int64_t at);

// apply_rotary_pos_emb of Hugging Face LLaMA as ATen ops: x [..., Dh] with the tables cos and sin' broadcast
// against it.
torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace ppo
