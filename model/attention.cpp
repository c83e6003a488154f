#include "model/attention.h"

#include <torch/version.h>

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "common/error.h"

namespace ppo {

// ---------------------------------------------------------------------------------------------------- kernels

#define PPO_TORCH_HAS_SDPA (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1))
#define PPO_TORCH_SDPA_GQA (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5))

bool sdpa_available() {
  return PPO_TORCH_HAS_SDPA;
}

bool use_sdpa(const std::string& name) {
  if (name == "eager") return false;
  if (name == "auto") return sdpa_available();
  if (name == "sdpa") {
    usage_check(sdpa_available(), std::string("model.attn_implementation=sdpa needs LibTorch >= 2.1; this build has ") +
                                      TORCH_VERSION + "; use eager or auto");
    return true;
  }
  throw UsageError("model.attn_implementation: unknown '" + name + "'; valid: auto | eager | sdpa");
}

// apply_rotary_pos_emb of Hugging Face LLaMA, x * cos + rotate_half(x) * sin with rotate_half([x1, x2]) =
// [-x2, x1], written as x * cos + [x2, x1] * sin' where sin' = [-sin, sin] (the sign lives in the table), and [x2, x1]
// is x seen as [..., 2, Dh / 2] with the halves flipped: one op (roll is three on the CPU, two narrows and a cat).
// (Not addcmul: its fused multiply-add rounds differently in the vectorised body and the tail of a buffer, so results
// would depend on the batch layout.)
torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  std::vector<int64_t> halves = x.sizes().vec();
  halves.back() /= 2;
  halves.insert(halves.end() - 1, 2);
  return (x * cos).add_(x.reshape(halves).flip(-2).view(x.sizes()) * sin);
}

// ---------------------------------------------------------------------------------------------------- RMSNorm

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

// LlamaRMSNorm: normalise in float32, cast back, then scale. (The casts are skipped for float32 input, and the
// scale factor is computed in place: these run per layer per decode step.)
torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  const bool is_float = x.scalar_type() == torch::kFloat;
  auto x32 = is_float ? x : x.to(torch::kFloat);
  auto inv_rms = x32.pow(2).mean(-1, /*keepdim=*/true);
  inv_rms.add_(eps).rsqrt_();
  auto normed = x32 * inv_rms;
  return weight * (is_float ? normed : normed.to(x.scalar_type()));
}

// ---------------------------------------------------------------------------------------------------- the module

AttentionImpl::AttentionImpl(const ModelConfig& c)
    : num_heads(c.num_heads),
      num_kv_heads(c.num_kv_heads),
      head_dim(head_dim_of(c)),
      sdpa(use_sdpa(c.attn_implementation)) {
  q_proj = register_module("q_proj", make_linear(c.hidden_size, num_heads * head_dim, c.attention_bias));
  k_proj = register_module("k_proj", make_linear(c.hidden_size, num_kv_heads * head_dim, c.attention_bias));
  v_proj = register_module("v_proj", make_linear(c.hidden_size, num_kv_heads * head_dim, c.attention_bias));
  o_proj = register_module("o_proj", make_linear(num_heads * head_dim, c.hidden_size, /*bias=*/false));
  if (c.qk_norm) {  // Qwen3Attention: Qwen3RMSNorm(head_dim) on each head of q and of k, before rotary
    q_norm = register_module("q_norm", RMSNorm(head_dim, c.rms_norm_eps));
    k_norm = register_module("k_norm", RMSNorm(head_dim, c.rms_norm_eps));
  }
}

torch::Tensor AttentionImpl::norm_q(const torch::Tensor& x) const {
  return q_norm ? q_norm.ptr()->forward(x) : x;
}

torch::Tensor AttentionImpl::norm_k(const torch::Tensor& x) const {
  return k_norm ? k_norm.ptr()->forward(x) : x;
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const AttentionInputs& inputs, KVCache* cache,
                                     int64_t layer) {
  const int64_t B = x.size(0), T = x.size(1);
  torch::Tensor q, k, v;  // [B, H, T, Dh], [B, H_kv, T, Dh] x 2
  const LayerProjections* fused = cache ? cache->projections.get() : nullptr;
  if (fused) {  // one projection; rotary applied to q and k heads together
    auto qkv = fused->project(layer, LayerProjections::qkv, x).view({B, T, num_heads + 2 * num_kv_heads, head_dim});
    auto qk = qkv.narrow(2, 0, num_heads + num_kv_heads);
    if (q_norm) qk = torch::cat({norm_q(qk.narrow(2, 0, num_heads)), norm_k(qk.narrow(2, num_heads, num_kv_heads))}, 2);
    qk = apply_rotary(qk, inputs.cos, inputs.sin);
    q = qk.narrow(2, 0, num_heads).transpose(1, 2);
    k = qk.narrow(2, num_heads, num_kv_heads).transpose(1, 2);
    v = qkv.narrow(2, num_heads + num_kv_heads, num_kv_heads).transpose(1, 2);
  } else {
    // In the [B, heads, T, Dh] layout, as Hugging Face: the attention matmuls see the same memory layout whatever
    // the batch, so results do not depend on how a batch is split (the N-ranks == 1-rank tests hold them to 1e-4).
    const auto cos = inputs.cos.transpose(1, 2), sin = inputs.sin.transpose(1, 2);  // [B, 1, T, Dh]
    q = apply_rotary(norm_q(adapted(q_proj, q_lora, x).view({B, T, num_heads, head_dim})).transpose(1, 2), cos, sin);
    k = apply_rotary(norm_k(adapted(k_proj, k_lora, x).view({B, T, num_kv_heads, head_dim})).transpose(1, 2), cos, sin);
    v = adapted(v_proj, v_lora, x).view({B, T, num_kv_heads, head_dim}).transpose(1, 2);
  }
  if (cache) {
    auto entry = cache->append(layer, k, v);
    k = entry.key;  // [B, H_kv, T_total, Dh]
    v = entry.value;
  }
  auto out = attend(q, k, v, inputs);                               // [B, H, T, Dh]
  out = out.transpose(1, 2).reshape({B, T, num_heads * head_dim});  // [B, T, H * Dh]
  return fused ? fused->project(layer, LayerProjections::o, out) : adapted(o_proj, o_lora, out);
}

// Masked keys get the dtype's lowest value (not -inf): a row with no allowed key (a pad query) becomes uniform
// instead of NaN, and in every other row exp(lowest - max) is exactly 0. Both kernels do the same.
torch::Tensor AttentionImpl::attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const AttentionInputs& inputs) const {
  if (inputs.packed) return attend_packed(q, k, v, *inputs.packed);
  const int64_t B = q.size(0), T = q.size(2), n_rep = num_heads / num_kv_heads, total = k.size(2);
#if PPO_TORCH_HAS_SDPA
  if (sdpa) {
    const torch::Tensor& bias = inputs.bias;  // [B, 1, T, T_total] in q's dtype
#if PPO_TORCH_SDPA_GQA
    return at::scaled_dot_product_attention(q, k.to(q.dtype()), v.to(q.dtype()), bias, /*dropout_p=*/0.0,
                                            /*is_causal=*/false, /*scale=*/std::nullopt, /*enable_gqa=*/n_rep > 1);
#else
    // Before 2.5 sdpa has no enable_gqa: repeat each kv head for its n_rep query heads (HF repeat_kv).
    const auto repeat = [&](const torch::Tensor& x) {
      return x.to(q.dtype())
          .unsqueeze(2)
          .expand({B, num_kv_heads, n_rep, total, head_dim})
          .reshape({B, num_heads, total, head_dim});
    };
    return at::scaled_dot_product_attention(q, repeat(k), repeat(v), bias, /*dropout_p=*/0.0, /*is_causal=*/false);
#endif
  }
#endif
  // Eager. Grouped-query attention without copying k/v per query head (HF repeat_kv): query head h uses kv head
  // h / n_rep, so the n_rep query heads of a group are stacked along the query axis of one matmul.
  auto grouped_q = q.reshape({B, num_kv_heads, n_rep * T, head_dim});  // [B, H_kv, n_rep * T, Dh]
  auto scores = torch::matmul(grouped_q, k.transpose(-2, -1)).view({B, num_heads, T, total});  // [B, H, T, T_total]
  if (scores.scalar_type() != torch::kFloat) scores = scores.to(torch::kFloat);
  scores.div_(std::sqrt(double(head_dim))).add_(inputs.bias);  // masked: lowest + score == lowest
  auto weights = torch::softmax(scores, -1).to(v.scalar_type()).view({B, num_kv_heads, n_rep * T, total});
  return torch::matmul(weights, v).view({B, num_heads, T, head_dim});
}

// Packed sequences: each bucket's sequences are gathered into a padded [n, heads, L, Dh] batch, attended with the
// bucket's causal and padding mask, and their real slots laid back in packed order. Gathers and scatters run along
// the token axis of the token-major memory the projections wrote ([N, heads, Dh]), so that each is one row copy.
torch::Tensor AttentionImpl::attend_packed(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                           const PackedAttention& plan) const {
  TORCH_CHECK(q.size(0) == 1 && q.size(2) == k.size(2), "attention over packed sequences: one row, no cache");
  const int64_t N = q.size(2);
  // [1, heads, N, Dh] (token-major underneath) -> [n, heads, L, Dh] for one bucket.
  const auto gather = [](const torch::Tensor& x, const SegmentBucket& b) {
    return x[0]
        .transpose(0, 1)
        .index_select(0, b.gather)
        .view({b.count, b.length, x.size(1), x.size(3)})
        .transpose(1, 2);
  };
  std::vector<torch::Tensor> outputs;  // per bucket [n * L, heads * Dh], padding slots included
  for (const SegmentBucket& b : plan.buckets) {
    AttentionInputs bucket;
    bucket.bias = b.bias;
    const torch::Tensor out = attend(gather(q, b), gather(k, b), gather(v, b), bucket);  // [n, H, L, Dh]
    outputs.push_back(out.transpose(1, 2).reshape({b.count * b.length, num_heads * head_dim}));
  }
  const torch::Tensor laid = outputs.size() == 1 ? outputs[0] : torch::cat(outputs, 0);
  // [1, heads, N, Dh] whose transpose(1, 2) is contiguous, as the caller lays it out next.
  return laid.index_select(0, plan.order).view({1, N, num_heads, head_dim}).transpose(1, 2);
}

}  // namespace ppo
