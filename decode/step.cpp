// The decode step over the static buffers (DecodeBuffers) and the static KV cache: each module's part of it as a
// function of the module, its fused weights and the step's shared inputs.
#include "decode/step.h"

#include <tuple>

#include "decode/kernels.h"

namespace ppo {

namespace {

// What every layer of one decode step shares.
struct StepInputs {
  // The ATen path: cos and sin [S, 1, Dh], bias [S, 1, 1, C]; with the CPU kernels only bias [S, C].
  AttentionInputs attention;
  bool cpu_kernels = false;            // the CPU kernels run (decode/kernels.h), reading the fields below
  torch::Tensor cos_table, sin_table;  // [N, Dh] float32, the rotary tables of every position
  torch::Tensor positions;             // [S] int64, each row's position
  int64_t write_at = 0;                // the cache position the step writes (the static cache's write_at)
  int64_t key_count = 0;               // the keys attended: the ones at or beyond are masked for every row
};

// x += a w in x's dtype; `product` (a's dtype, x's shape) holds a w first where the two dtypes differ.
void add_product(const torch::Tensor& x, const torch::Tensor& a, const FusedProjection& w,
                 const torch::Tensor& product) {
  if (product.defined()) {
    w.into(a, product, /*accumulate=*/false);
    x.add_(product);
  } else {
    w.into(a, x, /*accumulate=*/true);
  }
}

// The norm of x [S, D] into out [S, D]: with `kernels`, float32 on the CPU without autograd, one fused loop (the same
// maths, its sum taken in another order, so it rounds differently by about float32's epsilon); otherwise the
// module's forward, copied into out (in out's dtype).
void norm_step(RMSNormImpl& norm, const torch::Tensor& x, const torch::Tensor& out, bool kernels) {
  if (kernels && decode_kernels_apply(x, out) && norm.weight.scalar_type() == torch::kFloat && x.is_contiguous() &&
      out.is_contiguous())
    rms_norm_rows(x.data_ptr<float>(), norm.weight.data_ptr<float>(), x.size(0), x.size(1),
                  static_cast<float>(norm.eps), out.data_ptr<float>());
  else
    out.copy_(norm.forward(x));
}

// The attention of a step: rotary on the q and k heads of b.qkv, the new key and value stored at the written
// position of the static cache, attention over the cache into b.attended.
void attention_step(const AttentionImpl& a, DecodeBuffers& b, const StepInputs& in, KVCache& cache, int64_t layer) {
  const int64_t S = b.qkv.size(0), H = a.num_heads, H_kv = a.num_kv_heads, Dh = a.head_dim;
  if (in.cpu_kernels) {
    if (a.q_norm) {  // each row's q heads, then its k heads, normalised in place
      const int64_t row = b.qkv.stride(0);
      float* x = b.qkv.data_ptr<float>();
      for (int64_t s = 0; s < S; ++s) {
        rms_norm_rows(x + s * row, a.q_norm->weight.data_ptr<float>(), H, Dh, static_cast<float>(a.q_norm->eps),
                      x + s * row);
        rms_norm_rows(x + s * row + H * Dh, a.k_norm->weight.data_ptr<float>(), H_kv, Dh,
                      static_cast<float>(a.k_norm->eps), x + s * row + H * Dh);
      }
    }
    rotate_and_store_cpu(b.qkv, H, H_kv, in.cos_table, in.sin_table, in.positions, cache.keys[layer],
                         cache.values[layer], in.write_at);
    decode_attention_cpu({b.qkv.data_ptr<float>(), b.qkv.stride(0), cache.keys[layer], cache.values[layer],
                          in.attention.bias, b.attended.data_ptr<float>(), S, H_kv, H / H_kv, Dh},
                         in.key_count);
    return;
  }
  const torch::Tensor heads = b.qkv.view({S, H + 2 * H_kv, Dh});
  const torch::Tensor qk = heads.narrow(1, 0, H + H_kv);
  if (a.q_norm) {
    qk.narrow(1, 0, H).copy_(a.norm_q(qk.narrow(1, 0, H)));
    qk.narrow(1, H, H_kv).copy_(a.norm_k(qk.narrow(1, H, H_kv)));
  }
  qk.copy_(apply_rotary(qk, in.attention.cos, in.attention.sin));
  const auto entry = cache.write_step(layer, qk.narrow(1, H, H_kv).unsqueeze(2),
                                      heads.narrow(1, H + H_kv, H_kv).unsqueeze(2));  // [S, H_kv, C, Dh]
  b.attended.view({S, H, Dh})
      .copy_(a.attend(qk.narrow(1, 0, H).unsqueeze(2), entry.key, entry.value, in.attention).view({S, H, Dh}));
}

// The layer's forward with the fused weights on [S, D] rows, in the buffers: one matmul for q, k and v, rotary on q
// and k with the new key and value stored, attention over the cache, the output projection added to the residual
// stream, one matmul for gate and up, and the down projection added (an MoE layer: its experts' products added).
void layer_step(DecoderLayerImpl& layer, const FusedLayerWeights& w, DecodeBuffers& b, const StepInputs& in,
                KVCache& cache, int64_t index) {
  norm_step(*layer.input_layernorm, b.hidden, b.normed, in.cpu_kernels);
  w.qkv.into(b.normed, b.qkv, /*accumulate=*/false);
  attention_step(*layer.self_attn, b, in, cache, index);
  add_product(b.hidden, b.attended, w.o, b.product);
  norm_step(*layer.post_attention_layernorm, b.hidden, b.normed, in.cpu_kernels);
  if (layer.moe) {  // the experts' grouped products, as ATen ops (they count each expert's rows on the host)
    b.hidden.add_(layer.moe->forward(b.normed, in.attention.moe, index));
    return;
  }
  w.gate_up.into(b.normed, b.gate_up, /*accumulate=*/false);
  at::silu_out(b.act, b.gate).mul_(b.up);
  add_product(b.hidden, b.act, w.down, b.product);
}

}  // namespace

DecodeBuffers DecodeBuffers::first(int64_t rows) const {
  const auto head = [rows](const torch::Tensor& t) { return t.defined() ? t.narrow(0, 0, rows) : t; };
  DecodeBuffers b{head(hidden), head(normed), head(qkv), head(attended), head(gate_up),
                  {},           {},           head(act), head(product)};
  const int64_t I = act.size(1);
  b.gate = b.gate_up.narrow(1, 0, I);
  b.up = b.gate_up.narrow(1, I, I);
  return b;
}

DecodeBuffers decode_buffers(const TransformerImpl& model, int64_t rows) {
  const ModelConfig& config = model.config;
  const torch::Tensor& embedding = model.embed_tokens->weight;
  const auto residual = embedding.options().requires_grad(false);
  const auto compute = residual.dtype(model.compute_dtype());
  const int64_t D = config.hidden_size, Dh = head_dim_of(config), I = config.intermediate_size;
  DecodeBuffers b;
  b.hidden = torch::zeros({rows, D}, residual);
  b.normed = torch::zeros({rows, D}, compute);
  b.qkv = torch::zeros({rows, (config.num_heads + 2 * config.num_kv_heads) * Dh}, compute);
  b.attended = torch::zeros({rows, config.num_heads * Dh}, compute);
  b.gate_up = torch::zeros({rows, 2 * I}, compute);
  b.act = torch::zeros({rows, I}, compute);
  if (model.compute_dtype() != embedding.scalar_type()) b.product = torch::zeros({rows, D}, compute);
  return b.first(rows);
}

const torch::Tensor& decode_step(TransformerImpl& model, const FusedWeights& weights, const torch::Tensor& tokens,
                                 const torch::Tensor& positions, const torch::Tensor& key_bias, KVCache& cache,
                                 DecodeBuffers& buffers, bool cpu_kernels) {
  const int64_t S = tokens.size(0), C = cache.capacity();
  TORCH_CHECK(tokens.dim() == 1 && positions.sizes() == tokens.sizes() && buffers.hidden.size(0) == S,
              "decode_step: tokens, positions and the buffers must all have S rows");
  TORCH_CHECK(cache.write_at.defined() && cache.batch_size() >= S,
              "decode_step: the cache must be static (KVCache::allocate_static) with >= ", S, " rows");
  TORCH_CHECK(key_bias.dim() == 2 && key_bias.size(0) == S && key_bias.size(1) == C,
              "decode_step: key_bias must be [S, capacity] = [", S, ", ", C, "]");
  TORCH_CHECK(weights.layers.size() == model.layers->size(), "decode_step: the fused weights of another model");
  at::index_select_out(buffers.hidden, model.embed_tokens->weight, 0, tokens);
  StepInputs in;
  in.cpu_kernels =
      cpu_kernels && decode_kernels_apply(buffers.qkv, cache.keys[0]) && key_bias.scalar_type() == torch::kFloat;
  in.key_count = cache.length() + 1;
  if (in.cpu_kernels) {
    std::tie(in.cos_table, in.sin_table) = model.rotary_tables(positions.device());
    in.positions = positions;
    in.write_at = cache.write_at.data_ptr<int64_t>()[0];
    in.attention.bias = key_bias;
  } else {
    std::tie(in.attention.cos, in.attention.sin) = model.rotary(positions.view({S, 1}), 0, buffers.qkv.scalar_type());
    in.attention.cos = in.attention.cos.view({S, 1, -1});  // [S, 1, Dh]
    in.attention.sin = in.attention.sin.view({S, 1, -1});
    in.attention.bias = key_bias.view({S, 1, 1, C});
  }
  in.attention.moe = model.forward_routing({}, nullptr);  // recording or replaying only: a step has no autograd
  const bool gather = model.shards && model.shards->gathers_layers();
  for (size_t i = 0; i < model.layers->size(); ++i) {
    const auto index = static_cast<int64_t>(i);
    if (gather) model.shards->gather(index);
    layer_step(*model.layers->ptr<DecoderLayerImpl>(i), weights.layers[i], buffers, in, cache, index);
    if (gather) model.shards->release(index);
  }
  norm_step(*model.norm, buffers.hidden, buffers.normed, in.cpu_kernels);
  return buffers.normed;
}

}  // namespace ppo
