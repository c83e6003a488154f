#include "model/transformer.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "common/error.h"
#include "common/random.h"
#include "common/strings.h"
#include "model/model_shape.h"

namespace ppo {

// ---------------------------------------------------------------------------------------------------- layers

MLPImpl::MLPImpl(const ModelConfig& c) {
  gate_proj = register_module("gate_proj", make_linear(c.hidden_size, c.intermediate_size, /*bias=*/false));
  up_proj = register_module("up_proj", make_linear(c.hidden_size, c.intermediate_size, /*bias=*/false));
  down_proj = register_module("down_proj", make_linear(c.intermediate_size, c.hidden_size, /*bias=*/false));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x, const LayerProjections* fused, int64_t layer) {
  if (!fused)
    return adapted(down_proj, down_lora, torch::silu(adapted(gate_proj, gate_lora, x)) * adapted(up_proj, up_lora, x));
  auto gate_up = fused->project(layer, LayerProjections::gate_up, x);  // [B, T, 2 I]
  const int64_t width = gate_up.size(-1) / 2;
  auto hidden = gate_up.narrow(-1, 0, width);
  torch::silu_(hidden);
  return fused->project(layer, LayerProjections::down, hidden.mul_(gate_up.narrow(-1, width, width)));
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& c, int64_t index) {
  self_attn = register_module("self_attn", Attention(c));
  if (is_moe_layer(c, index))
    moe = register_module("mlp", MoeBlock(c));
  else
    mlp = register_module("mlp", MLP(c));
  input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const AttentionInputs& inputs, KVCache* cache,
                                        int64_t layer) {
  auto h = x + self_attn(input_layernorm(x), inputs, cache, layer);
  if (moe) return h + moe->forward(post_attention_layernorm(h), inputs.moe, layer);
  return h + mlp(post_attention_layernorm(h), cache ? cache->projections.get() : nullptr, layer);
}

bool DecoderLayerImpl::draws_random() const {
  const auto& a = *self_attn;
  std::vector<const LoraAdapter*> adapters = {&a.q_lora, &a.k_lora, &a.v_lora, &a.o_lora};
  if (mlp) adapters.insert(adapters.end(), {&mlp->gate_lora, &mlp->up_lora, &mlp->down_lora});
  for (const LoraAdapter* adapter : adapters)
    if (*adapter && (*adapter)->dropout > 0 && (*adapter)->is_training()) return true;
  return false;
}

// ---------------------------------------------------------------------------------------------------- rotary

// transformers' modeling_rope_utils.py: _compute_default_rope_parameters, _compute_linear_scaling_rope_parameters,
// _compute_llama3_parameters and _compute_yarn_parameters (the same float32 ops, so the same roundings).
RotaryFrequencies rotary_frequencies(const ModelConfig& c) {
  const RopeScalingConfig& r = c.rope_scaling;
  const int64_t dim = head_dim_of(c);
  const double base = c.rope_theta;
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat);
  const auto exponents = torch::arange(0, dim, 2, f32.dtype(torch::kLong)).to(torch::kFloat) / double(dim);
  const torch::Tensor pos_freqs = torch::pow(base, exponents);  // [Dh / 2]
  torch::Tensor inv_freq = 1.0 / pos_freqs;
  const double original = static_cast<double>(
      r.original_max_position_embeddings > 0 ? r.original_max_position_embeddings : c.max_position_embeddings);
  if (r.rope_type == "linear") return {inv_freq / r.factor, 1.0};
  if (r.rope_type == "llama3") {
    const double low_freq_wavelen = original / r.low_freq_factor, high_freq_wavelen = original / r.high_freq_factor;
    const torch::Tensor wavelen = 2 * M_PI / inv_freq;
    torch::Tensor scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / r.factor, inv_freq);
    const torch::Tensor smooth = (original / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    const torch::Tensor smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
    const torch::Tensor medium = wavelen.ge(high_freq_wavelen).logical_and(wavelen.le(low_freq_wavelen));
    return {torch::where(medium, smoothed, scaled), 1.0};
  }
  if (r.rope_type == "yarn") {
    const double factor = r.factor;
    const double attention_factor =
        r.attention_factor > 0 ? r.attention_factor : (factor <= 1 ? 1.0 : 0.1 * std::log(factor) + 1.0);
    const auto correction_dim = [&](double rotations) {
      return (double(dim) * std::log(original / (rotations * 2 * M_PI))) / (2 * std::log(base));
    };
    double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
    if (r.truncate) low = std::floor(low), high = std::ceil(high);
    low = std::max(low, 0.0);
    high = std::min(high, double(dim - 1));
    if (low == high) high += 0.001;  // prevent a singularity, as transformers does
    const torch::Tensor ramp = ((torch::arange(dim / 2, f32) - low) / (high - low)).clamp(0, 1);
    const torch::Tensor extrapolation = 1 - ramp;
    const torch::Tensor interpolation = 1.0 / (factor * pos_freqs);
    return {interpolation * (1 - extrapolation) + inv_freq * extrapolation, attention_factor};
  }
  return {inv_freq, 1.0};
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

int64_t parameter_count(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const auto& p : module.parameters(/*recurse=*/true)) count += p.numel();
  return count;
}

namespace {

// The parameters of `module` by their names in the whole model (`prefix` + the module's own), in its order.
std::vector<std::pair<std::string, torch::Tensor>> prefixed_parameters(torch::nn::Module& module,
                                                                       const std::string& prefix) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    out.emplace_back(prefix + item.key(), item.value());
  return out;
}

// A finished head model's "root" unit (all but the decoder layers) to `sink`, when there is one.
void hand_over_root(torch::nn::Module& model, UnitSink* sink) {
  if (!sink) return;
  std::vector<std::pair<std::string, torch::Tensor>> root;
  for (auto& [name, p] : prefixed_parameters(model, ""))
    if (!starts_with(name, "model.layers.")) root.emplace_back(name, p);
  sink->take("root", root);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------- backbone

TransformerImpl::TransformerImpl(const ModelConfig& c, int64_t vocab_size, UnitSink* sink)
    : config(c), vocab_size(vocab_size), sdpa(use_sdpa(c.attn_implementation)) {
  validate_model_config(c, vocab_size);
  check_model_fits_memory(c, vocab_size, sink ? sink->shards() : 1);
  const torch::Dtype dtype = model_dtype(c.dtype);
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(vocab_size, c.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) {  // each parameter draws from its own generator: any order is alike
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    DecoderLayer layer(c, i);
    init_parameters(*layer, prefix, c.seed, c.init_std);
    layer->to(dtype);
    layers->push_back(layer);
    if (sink) sink->take(prefix.substr(0, prefix.size() - 1), prefixed_parameters(*layer, prefix));
  }
  norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  init_parameters(*embed_tokens, "model.embed_tokens.", c.seed, c.init_std);
  init_parameters(*norm, "model.norm.", c.seed, c.init_std);
  to(dtype);
}

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
  inputs.bias = attention_bias(attention_allowed(mask, T, config.sliding_window),
                               sdpa ? autocast_compute_dtype(hidden) : torch::kFloat);
  inputs.moe = forward_routing(mask.narrow(1, past, T), cache);
  hidden = run_blocks(hidden, inputs, cache);
  return norm(hidden);
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
  inputs.packed = std::make_shared<const PackedAttention>(
      plan_packed_attention(lengths, config.hidden_size, sdpa ? autocast_compute_dtype(hidden) : torch::kFloat,
                            input_ids.device(), kMaxBuckets, config.sliding_window));
  inputs.moe = forward_routing({}, nullptr);
  return norm(run_blocks(hidden, inputs, nullptr));
}

std::shared_ptr<MoeRouting> TransformerImpl::forward_routing(const torch::Tensor& token_mask, KVCache* cache) {
  const bool training = !cache && is_training() && torch::GradMode::is_enabled();
  if (!has_moe() || !(training || record_routing || replay_experts.defined())) return nullptr;
  last_routing = make_moe_routing(config, token_mask);
  last_routing->statistics = training;  // the losses and their metrics: training forwards only
  last_routing->record = record_routing;
  if (replay_experts.defined()) {
    TORCH_CHECK(replay_experts.dim() == 3 && replay_experts.size(1) == moe_layer_count(config),
                "Transformer: replay_experts must be [tokens, MoE layers, k]");
    for (int64_t i = 0, moe = 0; i < config.num_layers; ++i)
      if (is_moe_layer(config, i)) last_routing->replay[static_cast<size_t>(i)] = replay_experts.select(1, moe++);
  }
  return last_routing;
}

torch::Tensor TransformerImpl::chosen_experts() const {
  TORCH_CHECK(last_routing && last_routing->record, "Transformer::chosen_experts: no forward recorded its routing");
  std::vector<torch::Tensor> layers_chosen;
  for (int64_t i = 0; i < config.num_layers; ++i)
    if (is_moe_layer(config, i)) layers_chosen.push_back(last_routing->chosen.at(static_cast<size_t>(i)));
  return torch::stack(layers_chosen, 1).to(torch::kInt);
}

// Rotary tables as in LlamaRotaryEmbedding: inv_freq = theta^(-2i/Dh) (rescaled by model.rope_scaling), angle =
// position * inv_freq, duplicated over the two halves, computed in float32 (for every position at once, then looked
// up), times the scaling's attention factor, cast to the compute dtype.
void TransformerImpl::build_rotary_tables(torch::Device device, int64_t max_position) {
  const int64_t head_dim = head_dim_of(config), half = head_dim / 2;
  const int64_t positions = std::max(config.max_position_embeddings, max_position);
  if (rotary_cos_.defined() && rotary_cos_.size(0) >= positions && rotary_cos_.device() == device) return;
  auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(device);
  const RotaryFrequencies rotary = rotary_frequencies(config);
  auto inv_freq = rotary.inv_freq.to(device);                              // [Dh / 2]
  auto freqs = torch::arange(0, positions, f32).unsqueeze(-1) * inv_freq;  // [N, Dh / 2]
  auto cos = freqs.cos(), sin = freqs.sin();
  if (rotary.attention_factor != 1.0) cos.mul_(rotary.attention_factor), sin.mul_(rotary.attention_factor);
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

std::pair<torch::Tensor, torch::Tensor> TransformerImpl::rotary_tables(torch::Device device) {
  build_rotary_tables(device, 0);
  return {rotary_cos_, rotary_sin_};
}

torch::ScalarType TransformerImpl::bias_dtype() const {
  return sdpa ? compute_dtype() : torch::kFloat;
}

torch::ScalarType TransformerImpl::compute_dtype() const {
  if (config.autocast_dtype == "bfloat16") return torch::kBFloat16;
  if (config.autocast_dtype == "float16") return torch::kHalf;
  return model_dtype(config.dtype);
}

torch::Tensor TransformerImpl::run_blocks(torch::Tensor hidden, const AttentionInputs& inputs, KVCache* cache) {
  // Checkpointing applies to training forwards only: with a KV cache or without autograd nothing is stored anyway.
  // A sharded model (LayerShards) checkpoints every training forward whose gradients it reduces layer by layer.
  const bool training = cache == nullptr && is_training() && torch::GradMode::is_enabled();
  const bool checkpoint =
      training && (config.enable_gradient_checkpointing || (shards && shards->reduces_in_backward()));
  const bool gather = shards && shards->gathers_layers();
  for (size_t i = 0; i < layers->size(); ++i) {
    const std::shared_ptr<DecoderLayerImpl> layer = layers->ptr<DecoderLayerImpl>(i);
    const auto index = static_cast<int64_t>(i);
    if (checkpoint) {
      const auto forward = [layer, inputs, index](const torch::Tensor& x) {
        return layer->forward(x, inputs, nullptr, index);
      };
      hidden = checkpointed_layer(forward, index, shards && shards->reduces_in_backward() ? shards : nullptr, hidden,
                                  layer->draws_random(), config.autocast_dtype);
      continue;
    }
    if (gather) shards->gather(index);
    hidden = layer->forward(hidden, inputs, cache, index);
    if (gather) shards->release(index);
  }
  return hidden;
}

// ---------------------------------------------------------------------------------------------------- heads

CausalLMImpl::CausalLMImpl(const ModelConfig& c, int64_t vocab_size, UnitSink* sink) {
  model = register_module("model", Transformer(c, vocab_size, sink));
  if (!c.tie_word_embeddings) {
    lm_head = register_module("lm_head", make_linear(c.hidden_size, vocab_size, /*bias=*/false));
    init_parameters(*lm_head, "lm_head.", c.seed, c.init_std);
    lm_head->to(model_dtype(c.dtype));
  }
  hand_over_root(*this, sink);
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

ValueModelImpl::ValueModelImpl(const ModelConfig& c, int64_t vocab_size, UnitSink* sink) {
  model = register_module("model", Transformer(c, vocab_size, sink));
  value_head = register_module("value_head", make_linear(c.hidden_size, 1, /*bias=*/true));
  init_parameters(*value_head, "value_head.", c.seed, c.init_std);
  value_head->to(model_dtype(c.dtype));
  hand_over_root(*this, sink);
}

torch::Tensor ValueModelImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                      const torch::Tensor& attention_mask, KVCache* cache) {
  return values_from_hidden(model->forward(input_ids, position_ids, attention_mask, cache));  // [B, T]
}

torch::Tensor position_ids_from_mask(const torch::Tensor& attention_mask) {
  return (attention_mask.to(torch::kLong).cumsum(1) - 1).clamp_min(0);
}

torch::Tensor ValueModelImpl::values_from_hidden(const torch::Tensor& hidden) {
  AutocastGuard autocast(model->config.autocast_dtype, hidden.device());
  return value_head(hidden).squeeze(-1).to(torch::kFloat);
}

torch::Tensor ValueModelImpl::scores_from_hidden(const torch::Tensor& hidden) {
  AutocastGuard autocast(model->config.autocast_dtype, hidden.device());
  return (torch::linear(hidden, value_head->weight) + value_head->bias * 0).squeeze(-1).to(torch::kFloat);
}

}  // namespace ppo
