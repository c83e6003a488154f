// Grouped-query attention of the decoder layers (Hugging Face's LlamaAttention and repeat_kv): what a forward's
// layers share (rotary tables, the mask of model/masks.h), the kernels (eager, sdpa), packed sequences attended
// bucket by bucket (model/packing.h plans the buckets), and the module with its q/k/v/o projections.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/config.h"
#include "model/kv_cache.h"
#include "model/lora_linear.h"
#include "model/masks.h"
#include "model/packing.h"

namespace ppo {

struct MoeRouting;  // model/moe.h

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
  // The MoE layers' shared record of a forward (model/moe.h): set by training forwards of a model with MoE layers.
  std::shared_ptr<MoeRouting> moe;
};

// apply_rotary_pos_emb of Hugging Face LLaMA: x [..., Dh] with the tables cos and sin' (AttentionInputs') broadcast
// against it.
torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

struct RMSNormImpl : torch::nn::Module {
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);  // [..., D] -> [..., D]
  torch::Tensor weight;                           // [D]
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
