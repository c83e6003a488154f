// See model/model_shape.h.
#include "model/model_shape.h"

#include <cmath>
#include <sstream>

#include "common/error.h"
#include "common/host_memory.h"
#include "model/attention.h"
#include "model/autocast.h"
#include "model/moe.h"

namespace ppo {

torch::Dtype model_dtype(const std::string& name) {
  if (name == "float32") return torch::kFloat;
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kHalf;
  throw UsageError("model.dtype: unknown dtype '" + name + "'; valid: float32 | bfloat16 | float16");
}

double attention_parameters(const ModelConfig& c) {
  const double D = static_cast<double>(c.hidden_size), head_dim = static_cast<double>(head_dim_of(c));
  const double q = static_cast<double>(c.num_heads) * head_dim, kv = static_cast<double>(c.num_kv_heads) * head_dim;
  return 2 * D * q + 2 * D * kv + (c.attention_bias ? q + 2 * kv : 0) + (c.qk_norm ? 2 * head_dim : 0);
}

double mlp_parameters(const ModelConfig& c, bool active) {
  const double D = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size);
  const double E = static_cast<double>(c.moe.num_experts), I_e = static_cast<double>(expert_intermediate_size(c));
  const double moe_layers = static_cast<double>(moe_layer_count(c));
  const double routed = active ? static_cast<double>(c.moe.num_experts_per_tok) : E;
  return (static_cast<double>(c.num_layers) - moe_layers) * 3 * D * I + moe_layers * (routed * 3 * D * I_e + E * D);
}

double model_parameters(const ModelConfig& c, int64_t vocab_size, bool active) {
  const double D = static_cast<double>(c.hidden_size);
  const double embeddings = static_cast<double>(vocab_size) * D * (c.tie_word_embeddings ? 1 : 2);
  return embeddings + static_cast<double>(c.num_layers) * (attention_parameters(c) + 2 * D) +
         mlp_parameters(c, active) + D;
}

namespace {

std::string number_text(double v) {
  std::ostringstream text;
  text << v;
  return text.str();
}

// What each Hugging Face family can express (the modelling files' parameters).
void check_model_type(const ModelConfig& c) {
  const std::string type = resolved_model_type(c);
  const auto fail = [&](const std::string& problem) {
    throw UsageError("model.model_type=" + c.model_type + (c.model_type == "auto" ? " (" + type + " here)" : "") + " " +
                     problem);
  };
  const bool qwen3 = type == "qwen3" || type == "qwen3_moe", moe_type = type == "qwen3_moe" || type == "mixtral";
  if (c.qk_norm != qwen3)
    fail(c.qk_norm ? "has no q/k norms (model.qk_norm=true is Qwen3's: model.model_type=qwen3 or qwen3_moe)"
                   : "has q/k norms: set model.qk_norm=true");
  if (c.sliding_window > 0 && type != "mistral" && type != "mixtral")
    fail("has no sliding window (model.sliding_window is Mistral's and Mixtral's)");
  if (moe_type != (c.moe.num_experts > 0))
    fail(moe_type ? "is a mixture-of-experts family: set model.moe.num_experts"
                  : "has no mixture-of-experts layers (model.moe.num_experts is Qwen3-MoE's and Mixtral's: "
                    "model.model_type=qwen3_moe or mixtral)");
  if (type == "mixtral" && (!c.moe.norm_topk_prob || !c.moe.mlp_only_layers.empty() || c.moe.decoder_sparse_step != 1))
    fail(
        "routes every layer and renormalises its top-k: model.moe.norm_topk_prob=true, model.moe.mlp_only_layers=[], "
        "model.moe.decoder_sparse_step=1");
  if (type == "qwen2" && (!c.attention_bias || (c.head_dim > 0 && c.head_dim * c.num_heads != c.hidden_size)))
    fail("has q/k/v biases and hidden_size / num_heads wide heads: model.attention_bias=true, model.head_dim=0");
  if (type == "mistral" && c.attention_bias) fail("has no attention biases: model.attention_bias=false");
}

void check_rope_scaling(const ModelConfig& c) {
  const RopeScalingConfig& r = c.rope_scaling;
  if (r.rope_type == "llama3")
    usage_check(r.high_freq_factor > r.low_freq_factor, "model.rope_scaling.high_freq_factor (" +
                                                            number_text(r.high_freq_factor) +
                                                            ") must exceed model.rope_scaling.low_freq_factor (" +
                                                            number_text(r.low_freq_factor) + ") for rope_type llama3");
}

// The mixture-of-experts keys: top-k within the experts, dense layers that exist.
void check_moe(const ModelConfig& c) {
  const MoeConfig& m = c.moe;
  if (m.num_experts == 0) return;
  usage_check(m.num_experts_per_tok >= 1, "model.moe.num_experts_per_tok must be >= 1");
  usage_check(m.num_experts_per_tok <= m.num_experts,
              "model.moe.num_experts_per_tok (" + std::to_string(m.num_experts_per_tok) +
                  ") must not exceed model.moe.num_experts (" + std::to_string(m.num_experts) + ")");
  for (const int64_t layer : m.mlp_only_layers)
    usage_check(layer >= 0 && layer < c.num_layers, "model.moe.mlp_only_layers: layer " + std::to_string(layer) +
                                                        " is not one of the model's " + std::to_string(c.num_layers));
}

}  // namespace

void validate_model_config(const ModelConfig& c, int64_t vocab_size) {
  auto s = [](int64_t v) { return std::to_string(v); };
  usage_check(vocab_size > 0, "model.vocab_size: the resolved vocabulary size must be positive, got " + s(vocab_size));
  // Far above any real model; low enough that no size computed from them overflows.
  const std::pair<const char*, int64_t> bounded[] = {{"model.hidden_size", c.hidden_size},
                                                     {"model.intermediate_size", c.intermediate_size},
                                                     {"model.num_layers", c.num_layers},
                                                     {"model.num_heads", c.num_heads},
                                                     {"model.num_kv_heads", c.num_kv_heads},
                                                     {"model.max_position_embeddings", c.max_position_embeddings},
                                                     {"model.vocab_size", vocab_size},
                                                     {"model.moe.num_experts", c.moe.num_experts},
                                                     {"model.moe.intermediate_size", c.moe.intermediate_size}};
  const int64_t limits[] = {
      int64_t{1} << 18, int64_t{1} << 20, 4096, 4096, 4096, int64_t{1} << 24, int64_t{1} << 24, 4096, int64_t{1} << 20};
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
  usage_check(c.head_dim > 0 || c.hidden_size % c.num_heads == 0,
              "model.hidden_size (" + s(c.hidden_size) + ") must be divisible by model.num_heads (" + s(c.num_heads) +
                  "), or model.head_dim must be set");
  usage_check(
      c.num_heads % c.num_kv_heads == 0,
      "model.num_heads (" + s(c.num_heads) + ") must be divisible by model.num_kv_heads (" + s(c.num_kv_heads) + ")");
  usage_check(head_dim_of(c) % 2 == 0 && head_dim_of(c) > 0,
              "the head dim (model.head_dim, or model.hidden_size / model.num_heads) is " + s(head_dim_of(c)) +
                  "; it must be even and positive for rotary embeddings");
  check_rope_scaling(c);
  check_moe(c);
  check_model_type(c);
  usage_check(c.max_position_embeddings >= 1, "model.max_position_embeddings must be >= 1");
  // rope_theta below 1 makes the rotary frequencies overflow (1e-300 gives inf); real models use 1e4 .. 1e7.
  const auto number = number_text;
  usage_check(std::isfinite(c.rope_theta) && c.rope_theta >= 1 && c.rope_theta <= 1e12,
              "model.rope_theta=" + number(c.rope_theta) + " is out of range: it must lie in [1, 1e12]");
  usage_check(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0 && c.rms_norm_eps <= 1,
              "model.rms_norm_eps=" + number(c.rms_norm_eps) + " is out of range: it must lie in (0, 1]");
  model_dtype(c.dtype);
  use_sdpa(c.attn_implementation);
  AutocastGuard::check_name(c.autocast_dtype);
}

std::string resolved_model_type(const ModelConfig& c) {
  if (c.model_type != "auto") return c.model_type;
  return c.attention_bias ? "qwen2" : "llama";
}

void check_model_fits_memory(const ModelConfig& c, int64_t vocab_size, int64_t shards) {
  const double parameters = model_parameters(c, vocab_size);
  const double bytes = 4 * parameters / static_cast<double>(shards);  // built in float32
  const double available = available_memory_bytes(), gib = 1 << 30;
  if (available < 0 || bytes <= available) return;
  std::ostringstream text;
  text.precision(3);
  text << "the model has " << parameters << " parameters, " << bytes / gib << " GiB in float32 while it is built"
       << (shards > 1 ? " (1 / " + std::to_string(shards) + " of it per rank)" : "") << ", and this machine has "
       << available / gib << " GiB of memory available: model.hidden_size=" << c.hidden_size
       << ", model.num_layers=" << c.num_layers << ", model.intermediate_size=" << c.intermediate_size
       << ", vocabulary " << vocab_size << (c.path.empty() ? "" : " (from " + c.path + "/config.json)");
  throw UsageError(text.str());
}

}  // namespace ppo
