#include "model/transformer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/version.h>

#include <cmath>
#include <limits>
#include <string>

#include "common/error.h"
#include "common/random.h"
#include "common/strings.h"

namespace ppo {

// ---------------------------------------------------------------------------------------------------- KVCache

KVCache::Entry KVCache::append(int64_t layer, const torch::Tensor& key, const torch::Tensor& value) {
  if (static_cast<int64_t>(keys.size()) <= layer) {
    keys.resize(layer + 1);
    values.resize(layer + 1);
    lengths.resize(layer + 1, 0);
  }
  const int64_t old_length = lengths[layer], new_length = old_length + key.size(2);
  torch::Tensor& k = keys[layer];
  torch::Tensor& v = values[layer];
  if (torch::GradMode::is_enabled()) {  // differentiable path: plain concatenation, capacity == length
    k = old_length == 0 ? key : torch::cat({k.narrow(2, 0, old_length), key}, 2);
    v = old_length == 0 ? value : torch::cat({v.narrow(2, 0, old_length), value}, 2);
  } else {
    if (!k.defined() || k.size(2) < new_length) {  // grow by doubling, keep the valid prefix
      const int64_t capacity = std::max({new_length, capacity_hint, k.defined() ? 2 * k.size(2) : int64_t{0}});
      auto grown_k = torch::empty({key.size(0), key.size(1), capacity, key.size(3)}, key.options());
      auto grown_v = torch::empty({value.size(0), value.size(1), capacity, value.size(3)}, value.options());
      if (old_length > 0) {
        grown_k.narrow(2, 0, old_length).copy_(k.narrow(2, 0, old_length));
        grown_v.narrow(2, 0, old_length).copy_(v.narrow(2, 0, old_length));
      }
      k = grown_k;
      v = grown_v;
    }
    k.narrow(2, old_length, key.size(2)).copy_(key);
    v.narrow(2, old_length, value.size(2)).copy_(value);
  }
  lengths[layer] = new_length;
  return {k.narrow(2, 0, new_length), v.narrow(2, 0, new_length)};
}

void KVCache::trim(int64_t length) {
  for (auto& l : lengths) l = std::min(l, length);
}

void KVCache::select(const torch::Tensor& rows) {
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!keys[i].defined()) continue;
    keys[i] = keys[i].index_select(0, rows);
    values[i] = values[i].index_select(0, rows);
  }
}

void KVCache::clear() {
  keys.clear();
  values.clear();
  lengths.clear();
}

// ---------------------------------------------------------------------------------------------------- layers

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

// LlamaRMSNorm: normalise in float32, cast back, then scale.
torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  auto x32 = x.to(torch::kFloat);
  auto normed = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(x.scalar_type());
}

namespace {

torch::nn::Linear make_linear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

// rotate_half of Hugging Face LLaMA: [x1, x2] -> [-x2, x1] over the last dimension's halves.
torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

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

AttentionImpl::AttentionImpl(const ModelConfig& c)
    : num_heads(c.num_heads),
      num_kv_heads(c.num_kv_heads),
      head_dim(c.hidden_size / c.num_heads),
      sdpa(use_sdpa(c.attn_implementation)) {
  q_proj = register_module("q_proj", make_linear(c.hidden_size, num_heads * head_dim, c.attention_bias));
  k_proj = register_module("k_proj", make_linear(c.hidden_size, num_kv_heads * head_dim, c.attention_bias));
  v_proj = register_module("v_proj", make_linear(c.hidden_size, num_kv_heads * head_dim, c.attention_bias));
  o_proj = register_module("o_proj", make_linear(num_heads * head_dim, c.hidden_size, false));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const AttentionInputs& inputs, KVCache* cache,
                                     int64_t layer) {
  const int64_t B = x.size(0), T = x.size(1);
  auto q = q_proj(x).view({B, T, num_heads, head_dim}).transpose(1, 2);     // [B, H, T, Dh]
  auto k = k_proj(x).view({B, T, num_kv_heads, head_dim}).transpose(1, 2);  // [B, H_kv, T, Dh]
  auto v = v_proj(x).view({B, T, num_kv_heads, head_dim}).transpose(1, 2);  // [B, H_kv, T, Dh]
  q = q * inputs.cos + rotate_half(q) * inputs.sin;
  k = k * inputs.cos + rotate_half(k) * inputs.sin;
  if (cache) {
    auto entry = cache->append(layer, k, v);
    k = entry.key;  // [B, H_kv, T_total, Dh]
    v = entry.value;
  }
  auto out = attend(q, k, v, inputs);                               // [B, H, T, Dh]
  out = out.transpose(1, 2).reshape({B, T, num_heads * head_dim});  // [B, T, H * Dh]
  return o_proj(out);
}

// Masked keys get the dtype's lowest value (not -inf): a row with no allowed key (a pad query) becomes uniform
// instead of NaN, and in every other row exp(lowest - max) is exactly 0. Both kernels do the same.
torch::Tensor AttentionImpl::attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const AttentionInputs& inputs) const {
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
  scores = scores.to(torch::kFloat) / std::sqrt(double(head_dim));
  scores = scores.masked_fill(inputs.allowed.logical_not(), std::numeric_limits<float>::lowest());
  auto weights = torch::softmax(scores, -1).to(v.scalar_type()).view({B, num_kv_heads, n_rep * T, total});
  return torch::matmul(weights, v).view({B, num_heads, T, head_dim});
}

MLPImpl::MLPImpl(const ModelConfig& c) {
  gate_proj = register_module("gate_proj", make_linear(c.hidden_size, c.intermediate_size, false));
  up_proj = register_module("up_proj", make_linear(c.hidden_size, c.intermediate_size, false));
  down_proj = register_module("down_proj", make_linear(c.intermediate_size, c.hidden_size, false));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  return down_proj(torch::silu(gate_proj(x)) * up_proj(x));
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& c) {
  self_attn = register_module("self_attn", Attention(c));
  mlp = register_module("mlp", MLP(c));
  input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const AttentionInputs& inputs, KVCache* cache,
                                        int64_t layer) {
  auto h = x + self_attn(input_layernorm(x), inputs, cache, layer);
  return h + mlp(post_attention_layernorm(h));
}

// ---------------------------------------------------------------------------------------------------- autocast

// Autocast state per device. LibTorch >= 2.4 takes the device type; before, CPU and CUDA have their own functions.
#define PPO_TORCH_AUTOCAST_BY_DEVICE (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))

namespace {

bool autocast_enabled(torch::DeviceType d) {
#if PPO_TORCH_AUTOCAST_BY_DEVICE
  return at::autocast::is_autocast_enabled(d);
#else
  return d == torch::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

torch::ScalarType autocast_dtype(torch::DeviceType d) {
#if PPO_TORCH_AUTOCAST_BY_DEVICE
  return at::autocast::get_autocast_dtype(d);
#else
  return d == torch::kCUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
#endif
}

void autocast_set(torch::DeviceType d, bool enabled, torch::ScalarType dtype) {
#if PPO_TORCH_AUTOCAST_BY_DEVICE
  at::autocast::set_autocast_enabled(d, enabled);
  at::autocast::set_autocast_dtype(d, dtype);
#else
  if (d == torch::kCUDA) {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

// The dtype the attention's q will have: autocast's when it is on for x's device, else x's.
torch::ScalarType autocast_compute_dtype(const torch::Tensor& x) {
  const torch::DeviceType d = x.device().type();
  return autocast_enabled(d) ? autocast_dtype(d) : x.scalar_type();
}

}  // namespace

void AutocastGuard::check_name(const std::string& name) {
  usage_check(name == "none" || name == "bfloat16" || name == "float16",
              "model.autocast_dtype: unknown '" + name + "'; valid: none | bfloat16 | float16");
}

AutocastGuard::AutocastGuard(const std::string& name, torch::Device device) : device_type_(device.type()) {
  check_name(name);
  if (name == "none") return;
  active_ = true;
  was_enabled_ = autocast_enabled(device_type_);
  was_dtype_ = autocast_dtype(device_type_);
  autocast_set(device_type_, true, name == "bfloat16" ? torch::kBFloat16 : torch::kHalf);
  at::autocast::increment_nesting();
}

// As torch.autocast's __exit__: restore the state, and drop the cast parameters cached inside the region when the
// outermost region ends (they would be stale after the next optimizer step).
AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  autocast_set(device_type_, was_enabled_, was_dtype_);
}

// ---------------------------------------------------------------------------------------------------- config

torch::Dtype model_dtype(const std::string& name) {
  if (name == "float32") return torch::kFloat;
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kHalf;
  throw UsageError("model.dtype: unknown dtype '" + name + "'; valid: float32 | bfloat16 | float16");
}

void validate_model_config(const ModelConfig& c, int64_t vocab_size) {
  auto s = [](int64_t v) { return std::to_string(v); };
  usage_check(vocab_size > 0, "model.vocab_size: the resolved vocabulary size must be positive, got " + s(vocab_size));
  usage_check(c.num_layers >= 1, "model.num_layers must be >= 1, got " + s(c.num_layers));
  usage_check(c.hidden_size >= 1 && c.intermediate_size >= 1, "model.hidden_size (" + s(c.hidden_size) +
                                                                  ") and model.intermediate_size (" +
                                                                  s(c.intermediate_size) + ") must be >= 1");
  usage_check(
      c.num_heads >= 1 && c.num_kv_heads >= 1,
      "model.num_heads (" + s(c.num_heads) + ") and model.num_kv_heads (" + s(c.num_kv_heads) + ") must be >= 1");
  usage_check(c.hidden_size % c.num_heads == 0, "model.hidden_size (" + s(c.hidden_size) +
                                                    ") must be divisible by model.num_heads (" + s(c.num_heads) + ")");
  usage_check(
      c.num_heads % c.num_kv_heads == 0,
      "model.num_heads (" + s(c.num_heads) + ") must be divisible by model.num_kv_heads (" + s(c.num_kv_heads) + ")");
  usage_check((c.hidden_size / c.num_heads) % 2 == 0, "model.hidden_size / model.num_heads (head dim " +
                                                          s(c.hidden_size / c.num_heads) +
                                                          ") must be even for rotary embeddings");
  usage_check(c.rope_theta > 0, "model.rope_theta must be > 0");
  usage_check(c.rms_norm_eps > 0, "model.rms_norm_eps must be > 0");
  model_dtype(c.dtype);
  use_sdpa(c.attn_implementation);
  AutocastGuard::check_name(c.autocast_dtype);
}

// ---------------------------------------------------------------------------------------------------- init

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

}  // namespace

void init_parameters(torch::nn::Module& module, const std::string& prefix, int64_t seed, double std) {
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    const std::string name = prefix + item.key();
    torch::Tensor p = item.value();
    if (ends_with(name, ".bias")) {
      p.zero_();
    } else if (p.dim() == 1) {  // RMSNorm weights
      p.fill_(1.0);
    } else {
      auto generator = at::detail::createCPUGenerator(splitmix64(static_cast<uint64_t>(seed) ^ fnv1a(name)));
      auto values = torch::empty(p.sizes(), torch::kFloat).normal_(0.0, std, generator);
      p.copy_(values);
    }
  }
}

int64_t parameter_count(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const auto& p : module.parameters(/*recurse=*/true)) count += p.numel();
  return count;
}

// ---------------------------------------------------------------------------------------------------- backbone

TransformerImpl::TransformerImpl(const ModelConfig& c, int64_t vocab_size)
    : config(c), vocab_size(vocab_size), sdpa(use_sdpa(c.attn_implementation)) {
  validate_model_config(c, vocab_size);
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(vocab_size, c.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) layers->push_back(DecoderLayer(c));
  norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  init_parameters(*this, "model.", c.seed, c.init_std);
  to(model_dtype(c.dtype));
}

namespace {

// Rotary tables as in LlamaRotaryEmbedding: inv_freq = theta^(-2i/Dh), angle = position * inv_freq, duplicated
// over the two halves; computed in float32, then cast to the compute dtype. position_ids [B, T] -> [B, 1, T, Dh].
std::pair<torch::Tensor, torch::Tensor> rotary_tables(const torch::Tensor& position_ids, int64_t head_dim, double theta,
                                                      torch::Dtype dtype) {
  auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(position_ids.device());
  auto exponents = torch::arange(0, head_dim, 2, f32.dtype(torch::kLong)).to(torch::kFloat) / double(head_dim);
  auto inv_freq = 1.0 / torch::pow(theta, exponents);                    // [Dh / 2]
  auto freqs = position_ids.to(torch::kFloat).unsqueeze(-1) * inv_freq;  // [B, T, Dh / 2]
  auto angles = torch::cat({freqs, freqs}, -1).unsqueeze(1);             // [B, 1, T, Dh]
  return {angles.cos().to(dtype), angles.sin().to(dtype)};
}

// 0 where allowed, else the lowest finite value of `dtype`. allowed [B, 1, T, T_total] bool.
torch::Tensor attention_bias(const torch::Tensor& allowed, torch::ScalarType dtype) {
  const double lowest = dtype == torch::kHalf       ? -65504.0
                        : dtype == torch::kBFloat16 ? -3.3895313892515355e38
                                                    : double(std::numeric_limits<float>::lowest());
  return torch::zeros(allowed.sizes(), allowed.options().dtype(dtype)).masked_fill(allowed.logical_not(), lowest);
}

// allowed[b, 0, i, j] = key j is not in query i's future AND attention_mask[b, j] == 1.
// Query i sits at absolute position past + i, past = T_total - T.
torch::Tensor attention_allowed(const torch::Tensor& attention_mask, int64_t T) {
  const int64_t total = attention_mask.size(1), past = total - T;
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(attention_mask.device());
  auto query_pos = torch::arange(past, total, opts).unsqueeze(1);  // [T, 1]
  auto key_pos = torch::arange(0, total, opts).unsqueeze(0);       // [1, T_total]
  auto causal = key_pos.le(query_pos);                             // [T, T_total]
  auto real = attention_mask.ne(0).unsqueeze(1).unsqueeze(1);      // [B, 1, 1, T_total]
  return causal.unsqueeze(0).unsqueeze(0).logical_and(real);       // [B, 1, T, T_total]
}

}  // namespace

torch::Tensor TransformerImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                       const torch::Tensor& attention_mask, KVCache* cache) {
  TORCH_CHECK(input_ids.dim() == 2 && position_ids.sizes() == input_ids.sizes(),
              "Transformer::forward: input_ids and position_ids must both be [B, T]");
  const int64_t B = input_ids.size(0), T = input_ids.size(1);
  const int64_t past = cache ? cache->length() : 0;
  torch::Tensor mask =
      attention_mask.defined() ? attention_mask : torch::ones({B, past + T}, input_ids.options().dtype(torch::kLong));
  TORCH_CHECK(mask.dim() == 2 && mask.size(0) == B && mask.size(1) == past + T,
              "Transformer::forward: attention_mask must be [B, cached + new] = [", B, ", ", past + T, "], got ",
              mask.sizes());
  AutocastGuard autocast(config.autocast_dtype, input_ids.device());
  auto hidden = embed_tokens(input_ids);  // [B, T, D]
  AttentionInputs inputs;
  std::tie(inputs.cos, inputs.sin) =
      rotary_tables(position_ids, config.hidden_size / config.num_heads, config.rope_theta, hidden.scalar_type());
  inputs.allowed = attention_allowed(mask, T);
  // The additive mask in the dtype q will have: autocast's when it is on (sdpa is on its lower-precision list, so a
  // float32 bias would be cast, and float32's lowest overflows to -inf in bfloat16), else the model's.
  if (sdpa) inputs.bias = attention_bias(inputs.allowed, autocast_compute_dtype(hidden));
  hidden = run_blocks(hidden, inputs, cache);
  return norm(hidden);
}

namespace {

// Backward of a gradient-checkpointed decoder layer (the reentrant scheme of torch.utils.checkpoint): the forward
// ran without autograd and kept only the layer's input; here the layer runs again with autograd on a detached copy
// of that input, and a nested backward with the incoming gradient accumulates the layer's parameter gradients and
// yields the gradient of the input, which flows on to the previous layer.
struct CheckpointedLayerBackward : torch::autograd::Node {
  DecoderLayer layer{nullptr};
  torch::Tensor input;  // [B, T, D], detached
  bool input_requires_grad = false;
  AttentionInputs inputs;
  std::string autocast_dtype;  // the recomputation runs under the forward's autocast, as torch.utils.checkpoint does

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    TORCH_CHECK(input.defined(), "checkpointed layer: backward through the graph a second time is not supported");
    torch::Tensor x = input.detach().requires_grad_(input_requires_grad);
    torch::Tensor y;
    {
      torch::AutoGradMode enable(true);
      AutocastGuard autocast(autocast_dtype, x.device());
      y = layer->forward(x, inputs, nullptr, 0);
    }
    if (grads[0].defined() && y.requires_grad()) torch::autograd::backward({y}, {grads[0]});
    torch::Tensor grad_input = input_requires_grad ? x.grad() : torch::Tensor();
    release_variables();
    return {grad_input};
  }
  void release_variables() override {
    input.reset();
    inputs = AttentionInputs{};
  }
  std::string name() const override { return "CheckpointedLayerBackward"; }
};

// One decoder layer that stores only its input for backward. Without grad mode it is the plain layer.
torch::Tensor checkpointed_layer(DecoderLayer layer, const torch::Tensor& hidden, const AttentionInputs& inputs,
                                 const std::string& autocast_dtype) {
  torch::Tensor out;
  {
    torch::NoGradGuard no_grad;
    out = layer->forward(hidden, inputs, nullptr, 0);
  }
  auto node = std::make_shared<CheckpointedLayerBackward>();
  node->layer = layer;
  node->input = hidden.detach();
  node->input_requires_grad = hidden.requires_grad();
  node->inputs = inputs;
  node->autocast_dtype = autocast_dtype;
  node->set_next_edges(torch::autograd::collect_next_edges(hidden));
  torch::autograd::set_history(out, node);
  return out;
}

}  // namespace

torch::Tensor TransformerImpl::run_blocks(torch::Tensor hidden, const AttentionInputs& inputs, KVCache* cache) {
  // Checkpointing applies to training forwards only: with a KV cache or without autograd nothing is stored anyway.
  const bool checkpoint =
      config.enable_gradient_checkpointing && cache == nullptr && is_training() && torch::GradMode::is_enabled();
  for (size_t i = 0; i < layers->size(); ++i) {
    DecoderLayer layer(layers->ptr<DecoderLayerImpl>(i));
    hidden = checkpoint ? checkpointed_layer(layer, hidden, inputs, config.autocast_dtype)
                        : layer->forward(hidden, inputs, cache, static_cast<int64_t>(i));
  }
  return hidden;
}

// ---------------------------------------------------------------------------------------------------- heads

CausalLMImpl::CausalLMImpl(const ModelConfig& c, int64_t vocab_size) {
  model = register_module("model", Transformer(c, vocab_size));
  if (!c.tie_word_embeddings) {
    lm_head = register_module("lm_head", make_linear(c.hidden_size, vocab_size, false));
    init_parameters(*lm_head, "lm_head.", c.seed, c.init_std);
    lm_head->to(model_dtype(c.dtype));
  }
}

torch::Tensor CausalLMImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                    const torch::Tensor& attention_mask, KVCache* cache) {
  return logits_from_hidden(model->forward(input_ids, position_ids, attention_mask, cache));
}

torch::Tensor CausalLMImpl::logits_from_hidden(const torch::Tensor& hidden) {
  AutocastGuard autocast(model->config.autocast_dtype, hidden.device());
  if (lm_head) return lm_head(hidden);
  return torch::nn::functional::linear(hidden, model->embed_tokens->weight);
}

ValueModelImpl::ValueModelImpl(const ModelConfig& c, int64_t vocab_size) {
  model = register_module("model", Transformer(c, vocab_size));
  value_head = register_module("value_head", make_linear(c.hidden_size, 1, true));
  init_parameters(*value_head, "value_head.", c.seed, c.init_std);
  value_head->to(model_dtype(c.dtype));
}

torch::Tensor ValueModelImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                      const torch::Tensor& attention_mask, KVCache* cache) {
  auto hidden = model->forward(input_ids, position_ids, attention_mask, cache);  // [B, T, D]
  AutocastGuard autocast(model->config.autocast_dtype, hidden.device());
  return value_head(hidden).squeeze(-1).to(torch::kFloat);  // [B, T]
}

}  // namespace ppo
