// config.json of Hugging Face folders: read into a ModelConfig (read_hf_config, model/hf_config.h) and written by
// export_hf (hf_config_json). References: transformers' configuration_qwen2.py, configuration_qwen3.py,
// configuration_llama.py, configuration_mistral.py, configuration_qwen3_moe.py, configuration_mixtral.py (fields and
// defaults) and modeling_rope_utils.py (rotary scaling).
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/strings.h"
#include "model/hf_config.h"
#include "model/model_shape.h"
#include "model/transformer.h"

namespace ppo {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The families read and written: config.json's model_type, its causal LM's architecture, and its sequence
// classifier's (a reward model: read, never written).
struct Family {
  const char* model_type;
  const char* architecture;
  const char* classifier;
};
constexpr Family kFamilies[] = {{"qwen2", "Qwen2ForCausalLM", "Qwen2ForSequenceClassification"},
                                {"llama", "LlamaForCausalLM", "LlamaForSequenceClassification"},
                                {"qwen3", "Qwen3ForCausalLM", "Qwen3ForSequenceClassification"},
                                {"mistral", "MistralForCausalLM", "MistralForSequenceClassification"},
                                {"qwen3_moe", "Qwen3MoeForCausalLM", "Qwen3MoeForSequenceClassification"},
                                {"mixtral", "MixtralForCausalLM", "MixtralForSequenceClassification"}};
// Families that are refused with a reason of their own.
constexpr std::pair<const char*, const char*> kRefused[] = {
    {"gemma3_text",
     "Gemma 3 (Gemma3ForCausalLM) is not supported yet: its GELU MLP, (1 + w) RMSNorm with four norms "
     "per layer and interleaved local and global layers are not built"},
    {"gemma3",
     "Gemma 3 (Gemma3ForConditionalGeneration) is not supported: a multimodal model; and its text model's "
     "GELU MLP, (1 + w) norms and local/global layers are not built"},
    {"qwen2_moe", "Qwen2-MoE is not supported: its shared expert is not built (Qwen3-MoE and Mixtral are)"}};

bool is_moe_family(const Family& family) {
  return family.model_type == std::string("qwen3_moe") || family.model_type == std::string("mixtral");
}

// ---------------------------------------------------------------------------------------------------- config.json

// Typed access to config.json fields; every error names the file and the field. A null field counts as absent.
struct FieldReader {
  const json& j;
  std::string origin;

  bool has(const std::string& key) const { return j.contains(key) && !j.at(key).is_null(); }
  [[noreturn]] void fail(const std::string& key, const std::string& problem) const {
    throw UsageError(origin + ": field \"" + key + "\" " + problem);
  }
  const json& required(const std::string& key) const {
    if (!has(key)) fail(key, "is missing");
    return j.at(key);
  }
  int64_t integer(const std::string& key) const {
    const json& v = required(key);
    if (!v.is_number_integer()) fail(key, "must be an integer, got " + v.dump());
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail(key, "is " + v.dump() + ", out of range");
    return v.get<int64_t>();
  }
  int64_t integer(const std::string& key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }
  double number(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    if (!j.at(key).is_number()) fail(key, "must be a number, got " + j.at(key).dump());
    return j.at(key).get<double>();
  }
  bool boolean(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j.at(key).is_boolean()) fail(key, "must be true or false, got " + j.at(key).dump());
    return j.at(key).get<bool>();
  }
  std::string string(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j.at(key).is_string()) fail(key, "must be a string, got " + j.at(key).dump());
    return j.at(key).get<std::string>();
  }
};

json read_config_json(const fs::path& path) {
  std::error_code error;
  usage_check(fs::exists(path, error), path.string() + ": not found (is this a Hugging Face model folder?)");
  json j = read_json_file(path.string());
  usage_check(j.is_object(), path.string() + ": expected a JSON object");
  return j;
}

std::string supported_families() {
  std::string text = "supported: ";
  for (const Family& family : kFamilies)
    text += std::string(&family == kFamilies ? "" : " | ") + family.architecture + " (" + family.model_type + ")";
  return text + ", and their *ForSequenceClassification reward models";
}

// The family of config.json, from "model_type" and "architectures" (either may be absent, not both, and they must
// agree); `classifier` says whether the architecture is the family's sequence classifier.
const Family& hf_family(const FieldReader& f, bool& classifier) {
  classifier = false;
  const std::string model_type = f.string("model_type", "");
  for (const auto& [refused_type, reason] : kRefused)
    if (model_type == refused_type) f.fail("model_type", "is \"" + model_type + "\": " + reason);
  const Family* by_type = nullptr;
  for (const Family& family : kFamilies)
    if (model_type == family.model_type) by_type = &family;
  if (!model_type.empty() && !by_type) f.fail("model_type", "is \"" + model_type + "\"; " + supported_families());
  const Family* by_architecture = nullptr;
  if (f.has("architectures")) {
    const json& a = f.j.at("architectures");
    if (!a.is_array() || a.size() != 1 || !a[0].is_string())
      f.fail("architectures", "must list exactly one architecture, got " + a.dump() + "; " + supported_families());
    const std::string arch = a[0].get<std::string>();
    for (const Family& family : kFamilies) {
      if (arch == family.architecture || arch == family.classifier) by_architecture = &family;
      if (arch == family.classifier) classifier = true;
    }
    if (!by_architecture) f.fail("architectures", "names \"" + arch + "\"; " + supported_families());
  }
  if (!by_type && !by_architecture)
    f.fail("architectures", "and \"model_type\" are both missing; " + supported_families());
  if (by_type && by_architecture && by_type != by_architecture)
    f.fail("model_type", "\"" + model_type + "\" contradicts architectures " + f.j.at("architectures").dump());
  return by_type ? *by_type : *by_architecture;
}

// rope_scaling (transformers 4) or rope_parameters (transformers 5: it also holds rope_theta) into c.rope_theta and
// c.rope_scaling: rope_type default, linear, llama3 or yarn (transformers' modeling_rope_utils.py), or an error
// naming the key.
void read_rope(const FieldReader& f, ModelConfig& c) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!f.has(key)) continue;
    const json& r = f.j.at(key);
    if (!r.is_object()) f.fail(key, "must be null or an object, got " + r.dump());
    const FieldReader field{r, f.origin + ": field \"" + key + "\""};
    const std::string type = field.string("rope_type", field.string("type", "default"));
    if (type != "default" && type != "linear" && type != "llama3" && type != "yarn")
      f.fail(key, "has rope_type \"" + type + "\"; supported: default | linear | llama3 | yarn");
    if (field.number("partial_rotary_factor", 1.0) != 1.0)
      f.fail(key, "has partial_rotary_factor " + r.at("partial_rotary_factor").dump() + "; only 1 is supported");
    c.rope_theta = field.number("rope_theta", c.rope_theta);
    RopeScalingConfig& s = c.rope_scaling;
    s.rope_type = type;
    if (type == "default") continue;
    s.original_max_position_embeddings =
        field.integer("original_max_position_embeddings", f.integer("original_max_position_embeddings", 0));
    const double derived_factor = s.original_max_position_embeddings > 0
                                      ? double(c.max_position_embeddings) / double(s.original_max_position_embeddings)
                                      : 1.0;
    if (type != "yarn" && !field.has("factor")) f.fail(key, "has no factor: " + r.dump());
    s.factor = field.number("factor", derived_factor);  // yarn without a factor: DeepSeek's ratio
    if (type == "llama3") {
      s.low_freq_factor = field.number("low_freq_factor", 0);
      s.high_freq_factor = field.number("high_freq_factor", 0);
      if (!field.has("low_freq_factor") || !field.has("high_freq_factor") ||
          !field.has("original_max_position_embeddings"))
        f.fail(key,
               "of rope_type llama3 needs factor, low_freq_factor, high_freq_factor and "
               "original_max_position_embeddings: " +
                   r.dump());
    }
    if (type == "yarn") {
      s.beta_fast = field.number("beta_fast", 0) > 0 ? field.number("beta_fast", 0) : 32.0;
      s.beta_slow = field.number("beta_slow", 0) > 0 ? field.number("beta_slow", 0) : 1.0;
      s.truncate = field.boolean("truncate", true);
      const auto mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
      const double m = field.number("mscale", 0), m_all = field.number("mscale_all_dim", 0);
      s.attention_factor =
          field.number("attention_factor",
                       m != 0 && m_all != 0 ? mscale(s.factor, m) / mscale(s.factor, m_all) : mscale(s.factor, 1));
    }
  }
}

// What changes the maths beyond the families' shapes: refused with the key and what is supported.
void check_supported(const FieldReader& f, const Family& family) {
  const std::string act = f.string("hidden_act", f.string("hidden_activation", "silu"));
  if (act != "silu")
    f.fail(f.has("hidden_act") ? "hidden_act" : "hidden_activation",
           "is \"" + act + "\"; only \"silu\" (SwiGLU) is supported");
  if (family.model_type != std::string("mistral") && family.model_type != std::string("mixtral") &&
      f.boolean("use_sliding_window", false))
    f.fail("use_sliding_window", "is true; sliding-window attention is supported for Mistral and Mixtral only");
  if (f.boolean("mlp_bias", false)) f.fail("mlp_bias", "is true; MLP projections without bias only");
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"})
    if (f.has(key)) f.fail(key, "is " + f.j.at(key).dump() + "; logit soft-capping is not supported (null only)");
  const bool moe = is_moe_family(family);
  for (const char* key : {"num_experts", "num_local_experts", "moe_intermediate_size", "n_routed_experts",
                          "shared_expert_intermediate_size", "n_shared_experts", "num_shared_experts"}) {
    const bool routed = std::string(key) != "n_routed_experts" && std::string(key).find("shared") == std::string::npos;
    if (f.has(key) && !(f.j.at(key).is_number() && f.j.at(key).get<double>() == 0) && !(moe && routed))
      f.fail(key, "is " + f.j.at(key).dump() +
                      (moe ? "; shared experts are not built (routed experts only)"
                           : "; mixture-of-experts models are Qwen3-MoE's and Mixtral's"));
  }
  if (f.number("router_jitter_noise", 0) != 0)
    f.fail("router_jitter_noise",
           "is " + f.j.at("router_jitter_noise").dump() + "; the router's training-time noise is not built (0 only)");
  const std::string scoring = f.string("scoring_func", f.string("router_type", "softmax"));
  if (scoring != "softmax")
    f.fail(f.has("scoring_func") ? "scoring_func" : "router_type",
           "is \"" + scoring + "\"; only a softmax top-k router is built");
  if (f.number("partial_rotary_factor", 1.0) != 1.0)
    f.fail("partial_rotary_factor", "is " + f.j.at("partial_rotary_factor").dump() + "; only 1 is supported");
  if (f.has("layer_types")) {
    const json& types = f.j.at("layer_types");
    if (!types.is_array()) f.fail("layer_types", "must be a list, got " + types.dump());
    for (const json& t : types)
      if (t != "full_attention")
        f.fail("layer_types", "has " + t.dump() + "; only \"full_attention\" layers are supported");
  }
}

// The experts of Qwen3MoeConfig (num_experts, which transformers 5 writes as num_local_experts; moe_intermediate_size;
// norm_topk_prob; decoder_sparse_step; mlp_only_layers) and MixtralConfig (num_local_experts; its experts are
// intermediate_size wide and always renormalised) into c.moe, with the classes' defaults. The loss coefficients stay
// the run's (model.moe.router_aux_loss_coef, router_z_loss_coef).
void read_moe(const FieldReader& f, ModelConfig& c) {
  const double aux = c.moe.router_aux_loss_coef, z = c.moe.router_z_loss_coef;
  c.moe = MoeConfig{};
  c.moe.router_aux_loss_coef = aux;
  c.moe.router_z_loss_coef = z;
  if (c.model_type == "mixtral") {
    c.moe.num_experts = f.integer("num_local_experts", f.integer("num_experts", 8));
    c.moe.num_experts_per_tok = f.integer("num_experts_per_tok", 2);
  } else if (c.model_type == "qwen3_moe") {
    c.moe.num_experts = f.integer("num_experts", f.integer("num_local_experts", 128));
    c.moe.num_experts_per_tok = f.integer("num_experts_per_tok", 8);
    c.moe.intermediate_size = f.integer("moe_intermediate_size", 768);
    c.moe.norm_topk_prob = f.boolean("norm_topk_prob", false);
    c.moe.decoder_sparse_step = f.integer("decoder_sparse_step", 1);
    if (f.has("mlp_only_layers")) {
      const json& layers = f.j.at("mlp_only_layers");
      if (!layers.is_array()) f.fail("mlp_only_layers", "must be a list of layer indices, got " + layers.dump());
      for (const json& layer : layers) {
        if (!layer.is_number_integer() || layer.get<int64_t>() < 0 || layer.get<int64_t>() >= c.num_layers)
          f.fail("mlp_only_layers", "has " + layer.dump() + ": not a layer index below num_hidden_layers (" +
                                        std::to_string(c.num_layers) + ")");
        c.moe.mlp_only_layers.push_back(layer.get<int64_t>());
      }
    }
    if (c.moe.decoder_sparse_step < 1) f.fail("decoder_sparse_step", "must be >= 1");
  }
  if (c.moe.num_experts < 1 && is_moe_family({c.model_type.c_str(), "", ""}))
    f.fail(c.model_type == "mixtral" ? "num_local_experts" : "num_experts", "must be >= 1");
  if (c.moe.num_experts_per_tok < 1 || c.moe.num_experts_per_tok > c.moe.num_experts)
    if (c.moe.num_experts > 0)
      f.fail("num_experts_per_tok", "is " + std::to_string(c.moe.num_experts_per_tok) + "; it must lie in [1, " +
                                        std::to_string(c.moe.num_experts) + "] (the experts)");
}

int64_t token_id(const FieldReader& f, const std::string& key) {
  if (!f.has(key)) return -1;
  const json& v = f.j.at(key);
  if (v.is_array() && !v.empty()) return v[0].is_number_integer() ? v[0].get<int64_t>() : -1;
  return v.is_number_integer() ? v.get<int64_t>() : -1;
}

std::vector<int64_t> token_ids(const FieldReader& f, const std::string& key) {
  std::vector<int64_t> ids;
  if (!f.has(key)) return ids;
  const json& v = f.j.at(key);
  for (const json& e : v.is_array() ? v : json::array({v})) {
    if (!e.is_number_integer()) f.fail(key, "must be a token id or a list of them, got " + v.dump());
    ids.push_back(e.get<int64_t>());
  }
  return ids;
}

json optional_id(int64_t id) {
  return id >= 0 ? json(id) : json(nullptr);
}

// model.rope_scaling as config.json's rope_scaling (null when unscaled), which transformers 4 and 5 both read.
json rope_scaling_json(const ModelConfig& c) {
  const RopeScalingConfig& r = c.rope_scaling;
  if (r.rope_type == "default") return nullptr;
  json j = {{"rope_type", r.rope_type}, {"factor", r.factor}};
  if (r.original_max_position_embeddings > 0)
    j["original_max_position_embeddings"] = r.original_max_position_embeddings;
  if (r.rope_type == "llama3") {
    j["low_freq_factor"] = r.low_freq_factor;
    j["high_freq_factor"] = r.high_freq_factor;
  }
  if (r.rope_type == "yarn") {
    j["beta_fast"] = r.beta_fast;
    j["beta_slow"] = r.beta_slow;
    j["truncate"] = r.truncate;
    if (r.attention_factor > 0) j["attention_factor"] = r.attention_factor;
  }
  return j;
}

}  // namespace

nlohmann::json hf_config_json(const ModelConfig& c, int64_t vocab_size, bool tied, const std::string& dtype,
                              const Tokenizer& tokenizer, bool classifier) {
  const std::string type = resolved_model_type(c);
  const char* architecture = "";
  for (const Family& family : kFamilies)
    if (type == family.model_type) architecture = classifier ? family.classifier : family.architecture;
  json j = {
      {"architectures", json::array({architecture})},
      {"attention_dropout", 0.0},
      {"bos_token_id", optional_id(tokenizer.bos_id())},
      {"eos_token_id", optional_id(tokenizer.eos_id())},
      {"hidden_act", "silu"},
      {"hidden_size", c.hidden_size},
      {"initializer_range", c.init_std},
      {"intermediate_size", c.intermediate_size},
      {"max_position_embeddings", c.max_position_embeddings},
      {"model_type", type},
      {"num_attention_heads", c.num_heads},
      {"num_hidden_layers", c.num_layers},
      {"num_key_value_heads", c.num_kv_heads},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_scaling", rope_scaling_json(c)},
      {"rope_theta", c.rope_theta},
      {"tie_word_embeddings", tied},
      {"torch_dtype", dtype},
      {"use_cache", true},
      {"vocab_size", vocab_size},
  };
  if (type == "qwen2" || type == "qwen3") {
    j["max_window_layers"] = c.num_layers;
    j["sliding_window"] = nullptr;
    j["use_sliding_window"] = false;
  }
  if (type != "qwen2") j["head_dim"] = head_dim_of(c);
  if (type == "llama" || type == "qwen3" || type == "qwen3_moe") j["attention_bias"] = c.attention_bias;
  if (type == "llama") {
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
  }
  if (type == "mistral" || type == "mixtral")
    j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
  if (type == "qwen3_moe") {
    j["num_experts"] = c.moe.num_experts;
    j["moe_intermediate_size"] = expert_intermediate_size(c);
    j["norm_topk_prob"] = c.moe.norm_topk_prob;
    j["decoder_sparse_step"] = c.moe.decoder_sparse_step;
    j["mlp_only_layers"] = c.moe.mlp_only_layers;
    j["sliding_window"] = nullptr;
    j["use_sliding_window"] = false;
    j["max_window_layers"] = c.num_layers;
  }
  if (type == "mixtral") {
    j["num_local_experts"] = c.moe.num_experts;
    j["intermediate_size"] = expert_intermediate_size(c);
    j["router_jitter_noise"] = 0.0;
  }
  if (c.moe.num_experts > 0) {
    j["num_experts_per_tok"] = c.moe.num_experts_per_tok;
    j["router_aux_loss_coef"] = c.moe.router_aux_loss_coef;
    j["output_router_logits"] = false;
  }
  if (classifier) {  // one label, as transformers writes num_labels=1; and the id its scoring skips at the end
    j["id2label"] = {{"0", "LABEL_0"}};
    j["label2id"] = {{"LABEL_0", 0}};
    const int64_t pad = tokenizer.pad_id();
    j["pad_token_id"] = pad >= 0 && pad != tokenizer.eos_id() ? json(pad) : json(nullptr);
  }
  return j;
}

HfModelInfo read_hf_config(const std::string& dir, const ModelConfig& base) {
  const fs::path path = fs::path(dir) / "config.json";
  const json j = read_config_json(path);
  const FieldReader f{j, path.string()};
  HfModelInfo info;
  const Family& family = hf_family(f, info.sequence_classifier);
  const std::string type = family.model_type;
  info.architecture = info.sequence_classifier ? family.classifier : family.architecture;
  ModelConfig& c = info.config;
  c = base;
  c.model_type = type;
  c.hidden_size = f.integer("hidden_size");
  c.intermediate_size = f.integer("intermediate_size");
  c.num_layers = f.integer("num_hidden_layers");
  c.num_heads = f.integer("num_attention_heads");
  c.num_kv_heads = f.integer("num_key_value_heads", c.num_heads);
  c.vocab_size = f.integer("vocab_size");
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  c.rope_theta = f.number("rope_theta", 10000.0);
  // The configuration classes' defaults.
  c.max_position_embeddings = f.integer("max_position_embeddings", type == "llama"     ? int64_t{2048}
                                                                   : type == "mistral" ? int64_t{131072}
                                                                                       : int64_t{32768});
  c.rope_scaling = RopeScalingConfig{};
  read_rope(f, c);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.attention_bias = type == "qwen2"                          ? true
                     : type == "mistral" || type == "mixtral" ? false
                                                              : f.boolean("attention_bias", false);
  if (c.num_heads <= 0) f.fail("num_attention_heads", "must be positive");
  // Qwen3Config's head_dim defaults to 128; the others' to hidden_size / num_attention_heads. Qwen2 has none.
  c.head_dim = f.integer("head_dim", type == "qwen3" ? 128 : 0);
  if (type == "qwen2" && c.head_dim != 0 && c.head_dim * c.num_heads != c.hidden_size)
    f.fail("head_dim", "is " + std::to_string(c.head_dim) + "; Qwen2 has hidden_size / num_attention_heads (" +
                           std::to_string(c.hidden_size / c.num_heads) + ")");
  if (c.head_dim * c.num_heads == c.hidden_size) c.head_dim = 0;  // the default width, said once
  c.qk_norm = type == "qwen3" || type == "qwen3_moe";
  // MistralConfig's sliding_window defaults to 4096; null turns it off. The others' is inert without
  // use_sliding_window (refused by check_supported).
  c.sliding_window = 0;
  if (type == "mistral") c.sliding_window = j.contains("sliding_window") ? f.integer("sliding_window", 0) : 4096;
  if (type == "mixtral") c.sliding_window = f.integer("sliding_window", 0);  // MixtralConfig's default: none
  if (c.sliding_window < 0) f.fail("sliding_window", "must be positive or null");
  check_supported(f, family);
  read_moe(f, c);
  info.torch_dtype = f.string("torch_dtype", f.string("dtype", ""));
  info.bos_token_id = token_id(f, "bos_token_id");
  info.eos_token_ids = token_ids(f, "eos_token_id");
  info.pad_token_id = token_id(f, "pad_token_id");
  // transformers' PretrainedConfig: id2label's size, else num_labels, else 2.
  if (f.has("id2label")) {
    if (!j.at("id2label").is_object()) f.fail("id2label", "must be an object of labels");
    info.num_labels = static_cast<int64_t>(j.at("id2label").size());
  } else {
    info.num_labels = f.integer("num_labels", 2);
  }
  try {
    validate_model_config(c, c.vocab_size);
  } catch (const UsageError& e) {
    throw UsageError(path.string() + ": " + e.what());
  }
  return info;
}

ModelConfig model_config_from_hf(const std::string& dir, const ModelConfig& base) {
  return read_hf_config(dir, base).config;
}

void resolve_model_path(ModelConfig& model) {
  if (model.path.empty()) return;
  const HfModelInfo info = read_hf_config(model.path, model);
  usage_check(!info.sequence_classifier, "model.path: " + model.path + " is a " + info.architecture +
                                             " folder (a reward model); the policy starts from a " +
                                             "*ForCausalLM folder");
  model = info.config;
  if (model.tokenizer == "char" && fs::is_regular_file(fs::path(model.path) / "tokenizer.json"))
    model.tokenizer = model.path;
}

}  // namespace ppo
