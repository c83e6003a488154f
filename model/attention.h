// Grouped-query attention of the decoder layers (Hugging Face's LlamaAttention and repeat_kv): the masks, the
// kernels (eager, sdpa; the decode step's CPU kernel in model/decode_step.h), packed sequences attended bucket by
// bucket (model/packing.h plans the buckets), and the module with its q/k/v/o projections.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/config.h"
#include "model/decode_step.h"
#include "model/kv_cache.h"
#include "model/lora_linear.h"
#include "model/packing.h"

namespace ppo {

struct MoeRouting;  // model/moe.h

// The lowest finite value of `dtype` (float32, bfloat16 or float16): what masked positions of an additive attention
// mask hold.
double mask_value(torch::ScalarType dtype);
// 0 where allowed, else the lowest finite value of `dtype`. allowed [B, 1, T, T_total] bool.
torch::Tensor attention_bias(const torch::Tensor& allowed, torch::ScalarType dtype);
// allowed[b, 0, i, j] = key j is not in query i's future AND attention_mask[b, j] == 1, for attention_mask
// [B, T_total] and T queries. Query i sits at absolute position past + i, past = T_total - T. With a sliding
// window W > 0 (model.sliding_window), also key j is one of the W last: past + i - j < W (a row's real tokens are
// contiguous, so columns apart are positions apart).
torch::Tensor attention_allowed(const torch::Tensor& attention_mask, int64_t T, int64_t sliding_window = 0);

// Whether this LibTorch has at::scaled_dot_product_attention with the `scale` argument (>= 2.1).
bool sdpa_available();
// model.attn_implementation resolved for this build: true = sdpa, false = eager. UsageError for sdpa without it, or
// an unknown name (listing the valid ones).
bool use_sdpa(const std::string& attn_implementation);

// What every attention layer of one forward shares: rotary tables and the mask.
struct AttentionInputs {
  torch::Tensor cos;  // [B, T, 1, Dh] cos(position * inv_freq), both halves
  torch::Tensor sin;  // [B, T, 1, Dh] sin of the same angles with the first half negated (rotate_half folded in)
  // [B, 1, T, T_total] additive mask: 0 where the key is a real token not in the query's future, else the lowest
  // finite value of its dtype (TransformerImpl::bias_dtype: float32 for eager attention, q's dtype for sdpa).
  torch::Tensor bias;
  // Packed sequences (model/packing.h), when set: B = 1, the T positions are sequences laid end to end, and each
  // attends causally within itself only, by this plan (`bias` is unused).
  std::shared_ptr<const PackedAttention> packed;
  // A decode step over a static cache (TransformerImpl::forward_step): the keys at or beyond this position are masked
  // for every row, so the CPU kernel stops there (other kernels attend over the whole width, which `bias` masks).
  // 0 = every key.
  int64_t key_count = 0;
  // The MoE layers' shared record of a forward (model/moe.h): set by training forwards of a model with MoE layers.
  std::shared_ptr<MoeRouting> moe;
};

// What every layer of one decode step shares.
struct StepInputs {
  // The ATen path: cos and sin [S, 1, Dh], bias [S, 1, 1, C]; with the CPU kernels only bias [S, C] and key_count.
  AttentionInputs attention;
  bool cpu_kernels = false;            // the CPU kernels run (model/decode_step.h), reading the fields below
  torch::Tensor cos_table, sin_table;  // [N, Dh] float32, the rotary tables of every position
  torch::Tensor positions;             // [S] int64, each row's position
  int64_t write_at = 0;                // the cache position the step writes (the static cache's write_at)
};

struct RMSNormImpl : torch::nn::Module {
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);  // [..., D] -> [..., D]
  // The decode step's norm of x [S, D] into out [S, D]: with `kernels`, float32 on the CPU without autograd, one
  // fused loop (the same maths, its sum taken in another order, so it rounds differently by about float32's
  // epsilon); otherwise forward, copied into out (in out's dtype).
  void forward_step(const torch::Tensor& x, const torch::Tensor& out, bool kernels);
  torch::Tensor weight;  // [D]
  double eps;
};
TORCH_MODULE(RMSNorm);

struct AttentionImpl : torch::nn::Module {
  explicit AttentionImpl(const ModelConfig& config);
  // x [B, T, D] -> [B, T, D]; `cache` (may be null) receives this layer's keys/values.
  torch::Tensor forward(const torch::Tensor& x, const AttentionInputs& inputs, KVCache* cache, int64_t layer);
  // softmax(q k^T / sqrt(Dh) + mask) v by the configured kernel: q [B, H, T, Dh], k and v [B, H_kv, T_total, Dh]
  // -> [B, H, T, Dh].
  torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const AttentionInputs& inputs) const;
  // attend for packed sequences (inputs.packed): each sequence causally within itself, bucket by bucket.
  torch::Tensor attend_packed(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const PackedAttention& plan) const;
  // A decode step's attention (model/decode_step.cpp): rotary on the q and k heads of b.qkv, the new key and value
  // stored at the written position of the static cache, attention over the cache into b.attended.
  void forward_step(DecodeBuffers& b, const StepInputs& in, KVCache& cache, int64_t layer) const;
  // With model.qk_norm (Qwen3): q_norm and k_norm over each head of x [..., heads, Dh] in place of x's values
  // (returns x unchanged without them).
  torch::Tensor norm_q(const torch::Tensor& x) const;
  torch::Tensor norm_k(const torch::Tensor& x) const;
  int64_t num_heads, num_kv_heads, head_dim;
  bool sdpa;  // model.attn_implementation resolved (use_sdpa)
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // [Dh] each, with model.qk_norm (Qwen3's); null otherwise
  LoraAdapter q_lora{nullptr}, k_lora{nullptr}, v_lora{nullptr}, o_lora{nullptr};  // null without LoRA
};
TORCH_MODULE(Attention);

}  // namespace ppo
