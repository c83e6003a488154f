// The decode step's CPU kernels: float32 loops on the CPU that run without autograd straight on tensors' memory, with
// no ATen op inside (no dispatch, no allocation): RMSNorm of rows, rotary on a step's new q and k heads with its new
// key and value stored into the static cache, and attention of one query per row over the cache. Each loop is
// vectorised by the compiler for AVX-512, AVX2 and baseline x86-64 and picked at load time. Other devices and dtypes
// run the same maths as ATen ops (decode/step.cpp).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace ppo {

// Whether the decode step's CPU kernels apply: every tensor is float32 on the CPU and autograd is off.
bool decode_kernels_apply(const torch::Tensor& activations, const torch::Tensor& cache_keys);

// out[r] = weight * x[r] / sqrt(mean(x[r]^2) + eps) for `rows` rows of `dim` floats (out may be x). RMSNormImpl's
// maths, its sum taken in another order, so it rounds differently by about float32's epsilon.
void rms_norm_rows(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* out);

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

}  // namespace ppo
