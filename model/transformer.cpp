#include "model/transformer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/version.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>

#include "common/error.h"
#include "common/random.h"
#include "common/strings.h"
#include "model/decode_step.h"

namespace ppo {

// ---------------------------------------------------------------------------------------------------- KVCache

void KVCache::allocate_static(const KVCache& like, int64_t rows, int64_t capacity) {
  clear();
  const auto zeros = [&](const torch::Tensor& t) {
    return torch::zeros({rows, t.size(1), capacity, t.size(3)}, t.options());
  };
  for (size_t i = 0; i < like.keys.size(); ++i) {
    keys.push_back(zeros(like.keys[i]));
    values.push_back(zeros(like.values[i]));
  }
  lengths.assign(like.keys.size(), 0);
  write_at = torch::zeros({1}, like.keys.at(0).options().dtype(torch::kLong));
}

KVCache::Entry KVCache::write_step(int64_t layer, const torch::Tensor& key, const torch::Tensor& value) {
  const int64_t B = key.size(0);
  torch::Tensor k = keys[layer].narrow(0, 0, B), v = values[layer].narrow(0, 0, B);
  k.index_copy_(2, write_at, key);
  v.index_copy_(2, write_at, value);
  return {k, v};
}

void KVCache::advance(int64_t count) {
  for (auto& l : lengths) l += count;
  TORCH_CHECK(length() <= capacity(), "KVCache::advance: ", length(), " positions in a cache of ", capacity());
}

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
    for (torch::Tensor* t : {&keys[i], &values[i]}) {
      if (write_at.defined())
        t->narrow(0, 0, rows.size(0)).copy_(t->index_select(0, rows));
      else
        *t = t->index_select(0, rows);
    }
  }
}

void KVCache::drop_front(int64_t count) {
  if (count <= 0) return;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!keys[i].defined()) continue;
    const int64_t kept = lengths[i] - count;
    TORCH_CHECK(kept >= 0, "KVCache::drop_front: ", count, " positions of ", lengths[i]);
    for (torch::Tensor* t : {&keys[i], &values[i]})
      if (kept > 0) t->narrow(2, 0, kept).copy_(t->narrow(2, count, kept).clone());
    lengths[i] = kept;
  }
}

void KVCache::write_rows(const torch::Tensor& rows, const KVCache& source, int64_t at) {
  const int64_t n = source.length();
  TORCH_CHECK(source.keys.size() == keys.size() && at >= 0 && at + n <= length(),
              "KVCache::write_rows: the source does not fit at position ", at);
  for (size_t i = 0; i < keys.size(); ++i) {
    keys[i].narrow(2, at, n).index_copy_(0, rows, source.keys[i].narrow(2, 0, n));
    values[i].narrow(2, at, n).index_copy_(0, rows, source.values[i].narrow(2, 0, n));
  }
}

void KVCache::clear() {
  keys.clear();
  values.clear();
  lengths.clear();
  write_at = torch::Tensor();
}

// ---------------------------------------------------------------------------------------------------- layers

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

namespace {

torch::nn::Linear make_linear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
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

LoraAdapterImpl::LoraAdapterImpl(int64_t in, int64_t out, int64_t rank, double scale, double dropout_p)
    : scaling(scale), dropout(dropout_p), enabled(std::make_shared<bool>(true)) {
  lora_A = register_module("lora_A", make_linear(in, rank, /*bias=*/false));
  lora_B = register_module("lora_B", make_linear(rank, out, /*bias=*/false));
}

torch::Tensor LoraAdapterImpl::forward(const torch::Tensor& x) {
  const torch::Tensor in = dropout > 0 ? torch::dropout(x, dropout, is_training()) : x;
  return lora_B(lora_A(in)) * scaling;
}

torch::Tensor LoraAdapterImpl::delta_weight() const {
  return torch::matmul(lora_B->weight, lora_A->weight) * scaling;
}

torch::Tensor adapted(torch::nn::Linear& linear, LoraAdapter& adapter, const torch::Tensor& x) {
  torch::Tensor y = linear(x);
  if (adapter && *adapter->enabled) y = y + adapter(x);
  return y;
}

AttentionImpl::AttentionImpl(const ModelConfig& c)
    : num_heads(c.num_heads),
      num_kv_heads(c.num_kv_heads),
      head_dim(c.hidden_size / c.num_heads),
      sdpa(use_sdpa(c.attn_implementation)) {
  q_proj = register_module("q_proj", make_linear(c.hidden_size, num_heads * head_dim, c.attention_bias));
  k_proj = register_module("k_proj", make_linear(c.hidden_size, num_kv_heads * head_dim, c.attention_bias));
  v_proj = register_module("v_proj", make_linear(c.hidden_size, num_kv_heads * head_dim, c.attention_bias));
  o_proj = register_module("o_proj", make_linear(num_heads * head_dim, c.hidden_size, /*bias=*/false));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const AttentionInputs& inputs, KVCache* cache,
                                     int64_t layer) {
  const int64_t B = x.size(0), T = x.size(1);
  torch::Tensor q, k, v;  // [B, H, T, Dh], [B, H_kv, T, Dh] x 2
  const FusedLayerWeights* fused = cache && cache->fused ? &cache->fused->at(layer) : nullptr;
  if (fused) {  // one projection; rotary applied to q and k heads together
    auto qkv = fused->qkv(x).view({B, T, num_heads + 2 * num_kv_heads, head_dim});
    auto qk = apply_rotary(qkv.narrow(2, 0, num_heads + num_kv_heads), inputs.cos, inputs.sin);
    q = qk.narrow(2, 0, num_heads).transpose(1, 2);
    k = qk.narrow(2, num_heads, num_kv_heads).transpose(1, 2);
    v = qkv.narrow(2, num_heads + num_kv_heads, num_kv_heads).transpose(1, 2);
  } else {
    // In the [B, heads, T, Dh] layout, as Hugging Face: the attention matmuls see the same memory layout whatever
    // the batch, so results do not depend on how a batch is split (the N-ranks == 1-rank tests hold them to 1e-4).
    const auto cos = inputs.cos.transpose(1, 2), sin = inputs.sin.transpose(1, 2);  // [B, 1, T, Dh]
    q = apply_rotary(adapted(q_proj, q_lora, x).view({B, T, num_heads, head_dim}).transpose(1, 2), cos, sin);
    k = apply_rotary(adapted(k_proj, k_lora, x).view({B, T, num_kv_heads, head_dim}).transpose(1, 2), cos, sin);
    v = adapted(v_proj, v_lora, x).view({B, T, num_kv_heads, head_dim}).transpose(1, 2);
  }
  if (cache) {
    auto entry = cache->append(layer, k, v);
    k = entry.key;  // [B, H_kv, T_total, Dh]
    v = entry.value;
  }
  auto out = attend(q, k, v, inputs);                               // [B, H, T, Dh]
  out = out.transpose(1, 2).reshape({B, T, num_heads * head_dim});  // [B, T, H * Dh]
  return fused ? fused->o(out) : adapted(o_proj, o_lora, out);
}

// Masked keys get the dtype's lowest value (not -inf): a row with no allowed key (a pad query) becomes uniform
// instead of NaN, and in every other row exp(lowest - max) is exactly 0. Both kernels do the same.
torch::Tensor AttentionImpl::attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const AttentionInputs& inputs) const {
  if (inputs.packed) return attend_packed(q, k, v, *inputs.packed);
  const int64_t B = q.size(0), T = q.size(2), n_rep = num_heads / num_kv_heads, total = k.size(2);
  // A float32 decode step on the CPU without autograd, with either implementation: one fused kernel. LibTorch's CPU
  // bmm would run one small GEMM per (sequence, kv head) matrix here, and sdpa's CPU kernel is slower too (decode
  // throughput of the tiny model 38.7k tokens/s with sdpa, 67.4k with this kernel, LibTorch 2.11, BENCHMARKS.md).
  if (T == 1 && decode_kernels_apply(q, k) && inputs.bias.scalar_type() == torch::kFloat) {
    const torch::Tensor rows = q.contiguous();  // [B, H, 1, Dh]
    auto out = torch::empty({B, num_heads, T, head_dim}, q.options());
    decode_attention_cpu({rows.data_ptr<float>(), num_heads * head_dim, k, v, inputs.bias.view({B, total}),
                          out.data_ptr<float>(), B, num_kv_heads, n_rep, head_dim},
                         inputs.key_count > 0 ? inputs.key_count : total);
    return out;
  }
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

MLPImpl::MLPImpl(const ModelConfig& c) {
  gate_proj = register_module("gate_proj", make_linear(c.hidden_size, c.intermediate_size, /*bias=*/false));
  up_proj = register_module("up_proj", make_linear(c.hidden_size, c.intermediate_size, /*bias=*/false));
  down_proj = register_module("down_proj", make_linear(c.intermediate_size, c.hidden_size, /*bias=*/false));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x, const FusedLayerWeights* fused) {
  if (!fused)
    return adapted(down_proj, down_lora, torch::silu(adapted(gate_proj, gate_lora, x)) * adapted(up_proj, up_lora, x));
  const int64_t width = fused->gate_up.out_features() / 2;
  auto gate_up = fused->gate_up(x);  // [B, T, 2 I]
  auto hidden = gate_up.narrow(-1, 0, width);
  torch::silu_(hidden);
  return fused->down(hidden.mul_(gate_up.narrow(-1, width, width)));
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
  return h + mlp(post_attention_layernorm(h), cache && cache->fused ? &cache->fused->at(layer) : nullptr);
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

double mask_value(torch::ScalarType dtype) {
  if (dtype == torch::kHalf) return -65504.0;
  if (dtype == torch::kBFloat16) return -3.3895313892515355e38;
  return double(std::numeric_limits<float>::lowest());
}

torch::Dtype model_dtype(const std::string& name) {
  if (name == "float32") return torch::kFloat;
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kHalf;
  throw UsageError("model.dtype: unknown dtype '" + name + "'; valid: float32 | bfloat16 | float16");
}

double available_memory_bytes() {
  double available = -1;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    double kib = 0;
    meminfo >> kib;
    if (key == "MemAvailable:") available = kib * 1024;
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  std::ifstream max_file("/sys/fs/cgroup/memory.max"), current_file("/sys/fs/cgroup/memory.current");
  double limit = 0, current = 0;
  if (max_file >> limit && current_file >> current && limit > current)  // "max" (no limit) does not read
    available = available < 0 ? limit - current : std::min(available, limit - current);
  return available;
}

double model_parameters(const ModelConfig& c, int64_t vocab_size) {
  const double D = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size);
  const double head_dim = D / static_cast<double>(c.num_heads), kv = static_cast<double>(c.num_kv_heads) * head_dim;
  const double attention = 2 * D * D + 2 * D * kv + (c.attention_bias ? D + 2 * kv : 0);
  const double layer = attention + 3 * D * I + 2 * D;
  const double embeddings = static_cast<double>(vocab_size) * D * (c.tie_word_embeddings ? 1 : 2);
  return embeddings + static_cast<double>(c.num_layers) * layer + D;
}

void validate_model_config(const ModelConfig& c, int64_t vocab_size) {
  auto s = [](int64_t v) { return std::to_string(v); };
  usage_check(vocab_size > 0, "model.vocab_size: the resolved vocabulary size must be positive, got " + s(vocab_size));
  // Far above any real model; low enough that no size computed from them overflows.
  const std::pair<const char*, int64_t> bounded[] = {
      {"model.hidden_size", c.hidden_size},   {"model.intermediate_size", c.intermediate_size},
      {"model.num_layers", c.num_layers},     {"model.num_heads", c.num_heads},
      {"model.num_kv_heads", c.num_kv_heads}, {"model.max_position_embeddings", c.max_position_embeddings},
      {"model.vocab_size", vocab_size}};
  const int64_t limits[] = {int64_t{1} << 18, int64_t{1} << 20, 4096, 4096, 4096, int64_t{1} << 24, int64_t{1} << 24};
  for (size_t i = 0; i < std::size(bounded); ++i)
    usage_check(bounded[i].second <= limits[i], std::string(bounded[i].first) + "=" + s(bounded[i].second) +
                                                    " is out of range: at most " + s(limits[i]));
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
  usage_check(c.max_position_embeddings >= 1, "model.max_position_embeddings must be >= 1");
  // rope_theta below 1 makes the rotary frequencies overflow (1e-300 gives inf); real models use 1e4 .. 1e7.
  const auto number = [](double v) {
    std::ostringstream text;
    text << v;
    return text.str();
  };
  usage_check(std::isfinite(c.rope_theta) && c.rope_theta >= 1 && c.rope_theta <= 1e12,
              "model.rope_theta=" + number(c.rope_theta) + " is out of range: it must lie in [1, 1e12]");
  usage_check(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0 && c.rms_norm_eps <= 1,
              "model.rms_norm_eps=" + number(c.rms_norm_eps) + " is out of range: it must lie in (0, 1]");
  model_dtype(c.dtype);
  use_sdpa(c.attn_implementation);
  AutocastGuard::check_name(c.autocast_dtype);
}

// ---------------------------------------------------------------------------------------------------- init

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

void check_model_fits_memory(const ModelConfig& c, int64_t vocab_size) {
  const double parameters = model_parameters(c, vocab_size), bytes = 4 * parameters;  // built in float32
  const double available = available_memory_bytes(), gib = 1 << 30;
  if (available < 0 || bytes <= available) return;
  std::ostringstream text;
  text.precision(3);
  text << "the model has " << parameters << " parameters, " << bytes / gib
       << " GiB in float32 while it is built, and this machine has " << available / gib
       << " GiB of memory available: model.hidden_size=" << c.hidden_size << ", model.num_layers=" << c.num_layers
       << ", model.intermediate_size=" << c.intermediate_size << ", vocabulary " << vocab_size
       << (c.path.empty() ? "" : " (from " + c.path + "/config.json)");
  throw UsageError(text.str());
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
  check_model_fits_memory(c, vocab_size);
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(vocab_size, c.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) layers->push_back(DecoderLayer(c));
  norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  init_parameters(*this, "model.", c.seed, c.init_std);
  to(model_dtype(c.dtype));
}

namespace {

// 0 where allowed, else the lowest finite value of `dtype`. allowed [B, 1, T, T_total] bool.
torch::Tensor attention_bias(const torch::Tensor& allowed, torch::ScalarType dtype) {
  return torch::zeros(allowed.sizes(), allowed.options().dtype(dtype))
      .masked_fill_(allowed.logical_not(), mask_value(dtype));
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
  // Positions are cumsum(mask) - 1 <= past + T - 1, or given explicitly below past + T by the caller.
  std::tie(inputs.cos, inputs.sin) = rotary(position_ids, past + T, hidden.scalar_type());
  // The additive mask: float32 for eager attention (added to float32 scores); for sdpa in the dtype q will have:
  // autocast's when it is on (sdpa is on its lower-precision list, so a float32 bias would be cast, and float32's
  // lowest overflows to -inf in bfloat16), else the model's.
  inputs.bias = attention_bias(attention_allowed(mask, T), sdpa ? autocast_compute_dtype(hidden) : torch::kFloat);
  hidden = run_blocks(hidden, inputs, cache);
  return norm(hidden);
}

namespace {

// A bucket's padded length: its longest sequence's, rounded up to a multiple of 64. The softmax and the
// probabilities-times-values product reduce over the bucket's length, and their rounding depends on it; with this,
// a sequence of up to 64 tokens is attended alike whichever sequences share its micro-batch (so N ranks, which
// group rows differently, compute what one rank does), and longer ones mostly are.
int64_t bucket_width(int64_t longest) {
  return (longest + 63) / 64 * 64;
}

}  // namespace

PackedAttention plan_packed_attention(const std::vector<int64_t>& lengths, int64_t width, torch::ScalarType bias_dtype,
                                      torch::Device device, int64_t max_buckets) {
  std::vector<int64_t> starts(lengths.size(), 0), sorted;  // sorted: the non-empty sequences, longest first
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (i > 0) starts[i] = starts[i - 1] + lengths[i - 1];
    if (lengths[i] > 0) sorted.push_back(static_cast<int64_t>(i));
  }
  std::stable_sort(sorted.begin(), sorted.end(), [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
  // best[k][i]: the least cost of sequences i.. in at most k buckets; a bucket starting at i is padded to lengths[i].
  const int64_t n = static_cast<int64_t>(sorted.size()), buckets = std::max<int64_t>(1, std::min(max_buckets, n));
  const auto work = [&](int64_t i, int64_t end) {
    const double l = static_cast<double>(bucket_width(lengths[sorted[i]]));
    return static_cast<double>(end - i) * l * l * static_cast<double>(width) + kBucketCost;
  };
  std::vector<std::vector<double>> best(buckets + 1, std::vector<double>(n + 1, 0));
  std::vector<std::vector<int64_t>> cut(buckets + 1, std::vector<int64_t>(n + 1, n));
  for (int64_t i = 0; i < n; ++i) best[1][i] = work(i, n);
  for (int64_t k = 2; k <= buckets; ++k) {
    for (int64_t i = 0; i < n; ++i) {
      best[k][i] = best[k - 1][i];
      cut[k][i] = cut[k - 1][i];
      for (int64_t end = i + 1; end < n; ++end) {
        const double w = work(i, end) + best[k - 1][end];
        if (w < best[k][i]) {
          best[k][i] = w;
          cut[k][i] = end;
        }
      }
    }
  }
  PackedAttention plan;
  std::vector<int64_t> order(static_cast<size_t>(std::accumulate(lengths.begin(), lengths.end(), int64_t{0})));
  int64_t slots = 0;  // the padded slots of the buckets before this one
  const auto on_device = [&](const std::vector<int64_t>& v) { return torch::tensor(v, torch::kLong).to(device); };
  for (int64_t i = 0, k = buckets; i < n; --k) {
    const int64_t end = k == 1 ? n : cut[k][i];
    SegmentBucket b;
    b.count = end - i;
    b.length = bucket_width(lengths[sorted[i]]);
    std::vector<int64_t> gather(static_cast<size_t>(b.count * b.length), 0), key_lengths;
    for (int64_t s = 0; s < b.count; ++s) {
      const int64_t row = sorted[i + s];
      key_lengths.push_back(lengths[row]);
      for (int64_t t = 0; t < lengths[row]; ++t) {
        gather[s * b.length + t] = starts[row] + t;
        order[starts[row] + t] = slots + s * b.length + t;
      }
    }
    slots += b.count * b.length;
    b.gather = on_device(gather);
    const auto positions = torch::arange(b.length, torch::TensorOptions().dtype(torch::kLong).device(device));
    const auto causal = positions.unsqueeze(0).le(positions.unsqueeze(1));                 // [L, L] key <= query
    const auto real_key = positions.unsqueeze(0).lt(on_device(key_lengths).unsqueeze(1));  // [n, L]
    b.bias = attention_bias(causal.unsqueeze(0).logical_and(real_key.unsqueeze(1)).unsqueeze(1), bias_dtype);
    plan.buckets.push_back(std::move(b));
    i = end;
  }
  plan.order = on_device(order);
  return plan;
}

torch::Tensor TransformerImpl::forward_packed(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                              const std::vector<int64_t>& lengths) {
  TORCH_CHECK(input_ids.dim() == 2 && input_ids.size(0) == 1 && position_ids.sizes() == input_ids.sizes(),
              "Transformer::forward_packed: input_ids and position_ids must both be [1, N]");
  const int64_t longest = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  AutocastGuard autocast(config.autocast_dtype, input_ids.device());
  auto hidden = embed_tokens(input_ids);  // [1, N, D]
  AttentionInputs inputs;
  std::tie(inputs.cos, inputs.sin) = rotary(position_ids, longest, hidden.scalar_type());
  inputs.packed = std::make_shared<const PackedAttention>(plan_packed_attention(
      lengths, config.hidden_size, sdpa ? autocast_compute_dtype(hidden) : torch::kFloat, input_ids.device()));
  return norm(run_blocks(hidden, inputs, nullptr));
}

// Rotary tables as in LlamaRotaryEmbedding: inv_freq = theta^(-2i/Dh), angle = position * inv_freq, duplicated
// over the two halves, computed in float32 (for every position at once, then looked up), cast to the compute dtype.
void TransformerImpl::build_rotary_tables(torch::Device device, int64_t max_position) {
  const int64_t head_dim = config.hidden_size / config.num_heads, half = head_dim / 2;
  const int64_t positions = std::max(config.max_position_embeddings, max_position);
  if (rotary_cos_.defined() && rotary_cos_.size(0) >= positions && rotary_cos_.device() == device) return;
  auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(device);
  auto exponents = torch::arange(0, head_dim, 2, f32.dtype(torch::kLong)).to(torch::kFloat) / double(head_dim);
  auto inv_freq = 1.0 / torch::pow(config.rope_theta, exponents);          // [Dh / 2]
  auto freqs = torch::arange(0, positions, f32).unsqueeze(-1) * inv_freq;  // [N, Dh / 2]
  auto cos = freqs.cos(), sin = freqs.sin();
  rotary_cos_ = torch::cat({cos, cos}, -1);   // [N, Dh]
  rotary_sin_ = torch::cat({-sin, sin}, -1);  // [N, Dh], rotate_half's sign folded in
  TORCH_CHECK(rotary_cos_.size(1) == 2 * half, "rotary: odd head dim");
  rotary_cos_cast_ = rotary_sin_cast_ = torch::Tensor();  // cast again from the new tables
}

std::pair<torch::Tensor, torch::Tensor> TransformerImpl::rotary(const torch::Tensor& position_ids, int64_t max_position,
                                                                torch::ScalarType dtype) {
  build_rotary_tables(position_ids.device(), max_position);
  const int64_t head_dim = rotary_cos_.size(1);
  const int64_t B = position_ids.size(0), T = position_ids.size(1);
  auto flat = position_ids.reshape({-1});
  const bool cast = dtype != torch::kFloat;
  if (cast && (!rotary_cos_cast_.defined() || rotary_cos_cast_.scalar_type() != dtype)) {
    rotary_cos_cast_ = rotary_cos_.to(dtype);
    rotary_sin_cast_ = rotary_sin_.to(dtype);
  }
  auto cos = (cast ? rotary_cos_cast_ : rotary_cos_).index_select(0, flat).view({B, T, 1, head_dim});
  auto sin = (cast ? rotary_sin_cast_ : rotary_sin_).index_select(0, flat).view({B, T, 1, head_dim});
  return {cos, sin};
}

torch::ScalarType TransformerImpl::bias_dtype() const {
  return sdpa ? compute_dtype() : torch::kFloat;
}

torch::ScalarType TransformerImpl::compute_dtype() const {
  if (config.autocast_dtype == "bfloat16") return torch::kBFloat16;
  if (config.autocast_dtype == "float16") return torch::kHalf;
  return model_dtype(config.dtype);
}

FusedWeights TransformerImpl::fused_weights() {
  torch::NoGradGuard no_grad;
  const torch::ScalarType dtype = compute_dtype();
  auto fused = std::make_shared<std::vector<FusedLayerWeights>>();
  for (size_t i = 0; i < layers->size(); ++i) {
    const auto& layer = *layers->ptr<DecoderLayerImpl>(i);
    const auto& a = *layer.self_attn;
    // LoRA's updates merged into the fused weights: W + scaling B A, once per generation.
    const auto merged = [](const torch::nn::Linear& linear, const LoraAdapter& adapter) {
      return adapter && *adapter->enabled ? linear->weight + adapter->delta_weight() : linear->weight;
    };
    const auto& m = *layer.mlp;
    FusedLayerWeights w;
    w.qkv = fuse_projection(
        torch::cat({merged(a.q_proj, a.q_lora), merged(a.k_proj, a.k_lora), merged(a.v_proj, a.v_lora)}, 0),
        a.q_proj->bias.defined() ? torch::cat({a.q_proj->bias, a.k_proj->bias, a.v_proj->bias}, 0) : torch::Tensor(),
        dtype);
    w.o = fuse_projection(merged(a.o_proj, a.o_lora), {}, dtype);
    w.gate_up =
        fuse_projection(torch::cat({merged(m.gate_proj, m.gate_lora), merged(m.up_proj, m.up_lora)}, 0), {}, dtype);
    w.down = fuse_projection(merged(m.down_proj, m.down_lora), {}, dtype);
    fused->push_back(std::move(w));
  }
  return fused;
}

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
  DecoderLayer layer{nullptr};
  int64_t index = 0;
  LayerShards* shards = nullptr;
  bool gather = false;
  torch::Tensor input;  // [B, T, D], detached
  bool input_requires_grad = false;
  AttentionInputs inputs;
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
      const auto forward = [&] { return layer->forward(x, inputs, nullptr, 0); };
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
    inputs = AttentionInputs{};
    rng.reset();
  }
  std::string name() const override { return "CheckpointedLayerBackward"; }
};

// Whether a training forward of `layer` draws random numbers: an adapter with dropout.
bool layer_has_dropout(const DecoderLayerImpl& layer) {
  const auto& a = *layer.self_attn;
  const auto& m = *layer.mlp;
  for (const LoraAdapter* adapter :
       {&a.q_lora, &a.k_lora, &a.v_lora, &a.o_lora, &m.gate_lora, &m.up_lora, &m.down_lora})
    if (*adapter && (*adapter)->dropout > 0 && (*adapter)->is_training()) return true;
  return false;
}

// One decoder layer that stores only its input for backward. Without grad mode it is the plain layer.
torch::Tensor checkpointed_layer(DecoderLayer layer, int64_t index, LayerShards* shards, const torch::Tensor& hidden,
                                 const AttentionInputs& inputs, const std::string& autocast_dtype) {
  const bool gather = shards && shards->gathers_layers();
  std::optional<RngState> rng;
  if (layer_has_dropout(*layer)) rng = RngState::of(hidden.device());
  torch::Tensor out;
  {
    torch::NoGradGuard no_grad;
    if (gather) shards->gather(index);
    out = layer->forward(hidden, inputs, nullptr, 0);
    if (gather) shards->release(index);
  }
  auto node = std::make_shared<CheckpointedLayerBackward>();
  node->layer = layer;
  node->index = index;
  node->shards = shards;
  node->gather = gather;
  node->input = hidden.detach();
  node->input_requires_grad = hidden.requires_grad();
  node->inputs = inputs;
  node->autocast_dtype = autocast_dtype;
  node->rng = std::move(rng);
  node->set_next_edges(torch::autograd::collect_next_edges(hidden));
  torch::autograd::set_history(out, node);
  return out;
}

}  // namespace

torch::Tensor TransformerImpl::run_blocks(torch::Tensor hidden, const AttentionInputs& inputs, KVCache* cache) {
  // Checkpointing applies to training forwards only: with a KV cache or without autograd nothing is stored anyway.
  // A sharded model (LayerShards) checkpoints every training forward whose gradients it reduces layer by layer.
  const bool training = cache == nullptr && is_training() && torch::GradMode::is_enabled();
  const bool checkpoint =
      training && (config.enable_gradient_checkpointing || (shards && shards->reduces_in_backward()));
  const bool gather = shards && shards->gathers_layers();
  for (size_t i = 0; i < layers->size(); ++i) {
    DecoderLayer layer(layers->ptr<DecoderLayerImpl>(i));
    const auto index = static_cast<int64_t>(i);
    if (checkpoint) {
      hidden = checkpointed_layer(layer, index, shards && shards->reduces_in_backward() ? shards : nullptr, hidden,
                                  inputs, config.autocast_dtype);
      continue;
    }
    if (gather) shards->gather(index);
    hidden = layer->forward(hidden, inputs, cache, index);
    if (gather) shards->release(index);
  }
  return hidden;
}

// ---------------------------------------------------------------------------------------------------- heads

CausalLMImpl::CausalLMImpl(const ModelConfig& c, int64_t vocab_size) {
  model = register_module("model", Transformer(c, vocab_size));
  if (!c.tie_word_embeddings) {
    lm_head = register_module("lm_head", make_linear(c.hidden_size, vocab_size, /*bias=*/false));
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
  value_head = register_module("value_head", make_linear(c.hidden_size, 1, /*bias=*/true));
  init_parameters(*value_head, "value_head.", c.seed, c.init_std);
  value_head->to(model_dtype(c.dtype));
}

torch::Tensor ValueModelImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                      const torch::Tensor& attention_mask, KVCache* cache) {
  return values_from_hidden(model->forward(input_ids, position_ids, attention_mask, cache));  // [B, T]
}

torch::Tensor ValueModelImpl::values_from_hidden(const torch::Tensor& hidden) {
  AutocastGuard autocast(model->config.autocast_dtype, hidden.device());
  return value_head(hidden).squeeze(-1).to(torch::kFloat);
}

}  // namespace ppo
