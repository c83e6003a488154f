// Hugging Face folders <-> ModelConfig + parameters. References: transformers configuration_qwen2.py and
// configuration_llama.py (fields and defaults), modeling_utils.py save_pretrained / load_state_dict (file names,
// sharding, the safetensors metadata {"format": "pt"} that load_state_dict checks).
#include "model/hf.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "common/error.h"
#include "common/json.h"
#include "common/strings.h"
#include "model/lora.h"
#include "model/safetensors.h"

namespace ppo {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The families read and written: config.json's model_type and its architecture.
struct Family {
  const char* model_type;
  const char* architecture;
};
constexpr Family kFamilies[] = {{"qwen2", "Qwen2ForCausalLM"},
                                {"llama", "LlamaForCausalLM"},
                                {"qwen3", "Qwen3ForCausalLM"},
                                {"mistral", "MistralForCausalLM"}};
// Families that are refused with a reason of their own.
constexpr std::pair<const char*, const char*> kRefused[] = {
    {"gemma3_text",
     "Gemma 3 (Gemma3ForCausalLM) is not supported yet: its GELU MLP, (1 + w) RMSNorm with four norms "
     "per layer and interleaved local and global layers are not built"},
    {"gemma3",
     "Gemma 3 (Gemma3ForConditionalGeneration) is not supported: a multimodal model; and its text model's "
     "GELU MLP, (1 + w) norms and local/global layers are not built"},
    {"qwen3_moe", "mixture-of-experts models (Qwen3-MoE) are not supported yet"},
    {"mixtral", "mixture-of-experts models (Mixtral) are not supported yet"},
    {"qwen2_moe", "mixture-of-experts models (Qwen2-MoE) are not supported yet"}};

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
  return text;
}

// The family of config.json, from "model_type" and "architectures" (either may be absent, not both, and they must
// agree).
const Family& hf_family(const FieldReader& f) {
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
    for (const Family& family : kFamilies)
      if (arch == family.architecture) by_architecture = &family;
    if (!by_architecture) f.fail("architectures", "names \"" + arch + "\"; " + supported_families());
  }
  if (!by_type && !by_architecture)
    f.fail("architectures", "and \"model_type\" are both missing; " + supported_families());
  if (by_type && by_architecture && by_type != by_architecture)
    f.fail("model_type",
           "\"" + model_type + "\" contradicts architectures [\"" + by_architecture->architecture + "\"]");
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
  if (family.model_type != std::string("mistral") && f.boolean("use_sliding_window", false))
    f.fail("use_sliding_window", "is true; sliding-window attention is supported for Mistral only");
  if (f.boolean("mlp_bias", false)) f.fail("mlp_bias", "is true; MLP projections without bias only");
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"})
    if (f.has(key)) f.fail(key, "is " + f.j.at(key).dump() + "; logit soft-capping is not supported (null only)");
  for (const char* key : {"num_experts", "num_local_experts", "moe_intermediate_size", "n_routed_experts"})
    if (f.has(key) && !(f.j.at(key).is_number() && f.j.at(key).get<double>() == 0))
      f.fail(key, "is " + f.j.at(key).dump() + "; mixture-of-experts models are not supported");
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

// ---------------------------------------------------------------------------------------------------- weights

// A bare backbone (Qwen2Model / LlamaModel) names its tensors without "model."; give them the prefix.
void add_backbone_prefix(std::map<std::string, torch::Tensor>& tensors) {
  for (const auto& item : tensors)
    if (starts_with(item.first, "model.")) return;
  if (tensors.count("embed_tokens.weight") == 0) return;
  std::map<std::string, torch::Tensor> prefixed;
  for (auto& item : tensors) prefixed.emplace("model." + item.first, std::move(item.second));
  tensors.swap(prefixed);
}

std::string list_names(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 5; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 5) s += ", ... (" + std::to_string(names.size()) + " in all)";
  return s;
}

// Writes model.safetensors, or HF-named shards + index, each with metadata {"format": "pt"}. Same split rule as
// save_safetensors_sharded (names sorted; a new shard when the next tensor would overflow the limit).
void write_hf_weights(const fs::path& dir, const std::map<std::string, torch::Tensor>& tensors, uint64_t max_bytes) {
  if (max_bytes == 0) throw UsageError(dir.string() + ": max_shard_bytes must be positive");
  const json metadata = {{"format", "pt"}};
  std::vector<std::map<std::string, torch::Tensor>> shards(1);
  uint64_t shard_bytes = 0, total = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t bytes = t.numel() * t.element_size();
    if (!shards.back().empty() && shard_bytes + bytes > max_bytes) shards.emplace_back(), shard_bytes = 0;
    shards.back().emplace(name, t);
    shard_bytes += bytes;
    total += bytes;
  }
  if (shards.size() == 1) return save_safetensors((dir / "model.safetensors").string(), tensors, metadata);
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    char file[64];
    std::snprintf(file, sizeof(file), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    save_safetensors((dir / file).string(), shards[i], metadata);
    for (const auto& entry : shards[i]) weight_map[entry.first] = file;
  }
  std::ofstream out(dir / "model.safetensors.index.json");
  out << json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) << "\n";
  if (!out) throw std::runtime_error((dir / "model.safetensors.index.json").string() + ": write failed");
}

constexpr const char* kTokenizerFiles[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
    "merges.txt",     "added_tokens.json",     "chat_template.jinja"};

bool is_weight_shard(const std::string& name) {
  return starts_with(name, "model-") && name.find("-of-") != std::string::npos && name.size() > 12 &&
         name.substr(name.size() - 12) == ".safetensors";
}

// A previous export's weight files would shadow or mix with the new ones (transformers prefers model.safetensors).
void remove_stale_weights(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name == "model.safetensors" || name == "model.safetensors.index.json" || is_weight_shard(name))
      fs::remove(entry.path());
  }
}

// ---------------------------------------------------------------------------------------------------- export

std::string torch_dtype_name(torch::Dtype dtype) {
  if (dtype == torch::kFloat) return "float32";
  if (dtype == torch::kBFloat16) return "bfloat16";
  if (dtype == torch::kHalf) return "float16";
  throw UsageError(std::string("export: parameters of dtype ") + c10::toString(dtype) + " cannot be exported");
}

void write_json(const fs::path& path, const json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";  // transformers: json.dumps(indent=2, sort_keys=True) + "\n"
  if (!out) throw std::runtime_error(path.string() + ": write failed");
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

json hf_config_json(const ModelConfig& c, int64_t vocab_size, bool tied, const std::string& dtype,
                    const Tokenizer& tokenizer) {
  const std::string type = resolved_model_type(c);
  const char* architecture = "";
  for (const Family& family : kFamilies)
    if (type == family.model_type) architecture = family.architecture;
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
  if (type == "llama" || type == "qwen3") j["attention_bias"] = c.attention_bias;
  if (type == "llama") {
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
  }
  if (type == "mistral") j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
  return j;
}

// `config` must describe `model`: config.json would otherwise not match the weights.
void check_describes(const ModelConfig& config, const ModelConfig& built) {
  const std::vector<std::tuple<const char*, int64_t, int64_t>> fields = {
      {"hidden_size", config.hidden_size, built.hidden_size},
      {"num_layers", config.num_layers, built.num_layers},
      {"num_heads", config.num_heads, built.num_heads},
      {"num_kv_heads", config.num_kv_heads, built.num_kv_heads},
      {"intermediate_size", config.intermediate_size, built.intermediate_size},
      {"attention_bias", config.attention_bias, built.attention_bias},
      {"head_dim", head_dim_of(config), head_dim_of(built)},
      {"qk_norm", config.qk_norm, built.qk_norm},
      {"sliding_window", config.sliding_window, built.sliding_window},
  };
  for (const auto& [key, given, actual] : fields)
    if (given != actual)
      throw UsageError(std::string("export: model.") + key + " is " + std::to_string(given) +
                       " but the model was built with " + std::to_string(actual));
}

void copy_tokenizer_files(const std::string& tokenizer_dir, const fs::path& out) {
  if (tokenizer_dir == "char") {
    std::ofstream note(out / "char_tokenizer.txt");
    note << "This model uses ppo.cpp's built-in character tokenizer (model.tokenizer=char), which has no\n"
            "tokenizer.json. Ids: 0 <pad>, 1 <bos>, 2 <eos>, 3 '\\n', 4..98 the printable ASCII characters 32..126\n"
            "in order (V = 99); '\\t' encodes as ' ', every other byte as '?'.\n";
    return;
  }
  const fs::path source(tokenizer_dir);
  fs::path folder = source;
  if (fs::is_regular_file(source)) {
    folder = source.parent_path().empty() ? fs::path(".") : source.parent_path();
    if (!fs::exists(out / "tokenizer.json") || !fs::equivalent(source, out / "tokenizer.json"))
      fs::copy_file(source, out / "tokenizer.json", fs::copy_options::overwrite_existing);
  } else if (!fs::is_directory(source)) {
    throw UsageError("model.tokenizer: '" + tokenizer_dir + "' is neither \"char\" nor a tokenizer folder or file");
  }
  for (const char* name : kTokenizerFiles) {
    const fs::path from = folder / name, to = out / name;
    if (!fs::is_regular_file(from)) continue;
    if (fs::is_regular_file(source) && std::string(name) == "tokenizer.json") continue;  // copied above
    if (fs::exists(to) && fs::equivalent(from, to)) continue;
    fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------- public

HfModelInfo read_hf_config(const std::string& dir, const ModelConfig& base) {
  const fs::path path = fs::path(dir) / "config.json";
  const json j = read_config_json(path);
  const FieldReader f{j, path.string()};
  const Family& family = hf_family(f);
  const std::string type = family.model_type;
  HfModelInfo info;
  info.architecture = family.architecture;
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
  c.attention_bias = type == "qwen2" ? true : type == "mistral" ? false : f.boolean("attention_bias", false);
  if (c.num_heads <= 0) f.fail("num_attention_heads", "must be positive");
  // Qwen3Config's head_dim defaults to 128; the others' to hidden_size / num_attention_heads. Qwen2 has none.
  c.head_dim = f.integer("head_dim", type == "qwen3" ? 128 : 0);
  if (type == "qwen2" && c.head_dim != 0 && c.head_dim * c.num_heads != c.hidden_size)
    f.fail("head_dim", "is " + std::to_string(c.head_dim) + "; Qwen2 has hidden_size / num_attention_heads (" +
                           std::to_string(c.hidden_size / c.num_heads) + ")");
  if (c.head_dim * c.num_heads == c.hidden_size) c.head_dim = 0;  // the default width, said once
  c.qk_norm = type == "qwen3";
  // MistralConfig's sliding_window defaults to 4096; null turns it off. The others' is inert without
  // use_sliding_window (refused by check_supported).
  c.sliding_window = 0;
  if (type == "mistral") c.sliding_window = j.contains("sliding_window") ? f.integer("sliding_window", 0) : 4096;
  if (c.sliding_window < 0) f.fail("sliding_window", "must be positive or null");
  check_supported(f, family);
  info.torch_dtype = f.string("torch_dtype", f.string("dtype", ""));
  info.bos_token_id = token_id(f, "bos_token_id");
  info.eos_token_ids = token_ids(f, "eos_token_id");
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
  model = model_config_from_hf(model.path, model);
  if (model.tokenizer == "char" && fs::is_regular_file(fs::path(model.path) / "tokenizer.json"))
    model.tokenizer = model.path;
}

namespace {

constexpr const char* kFromConfig = " (from config.json and the tokenizer)";

[[noreturn]] void throw_missing(const std::string& dir, const std::vector<std::string>& missing) {
  const std::string hint = std::find(missing.begin(), missing.end(), "lm_head.weight") != missing.end()
                               ? " (lm_head.weight is needed because tie_word_embeddings is false)"
                               : "";
  throw UsageError(dir + ": missing tensor(s) " + list_names(missing) + hint);
}

}  // namespace

HfLoadResult load_hf_weights(torch::nn::Module& module, const std::string& dir, bool allow_missing_value_head) {
  std::map<std::string, torch::Tensor> tensors = load_safetensors_dir(dir);
  add_backbone_prefix(tensors);
  HfLoadResult result;
  std::vector<std::string> missing;
  std::set<std::string> used;
  const auto params = module.named_parameters(/*recurse=*/true);
  for (const auto& item : params) {  // check everything before changing anything
    const std::string& name = item.key();
    const auto it = tensors.find(name);
    if (it == tensors.end()) {
      (allow_missing_value_head && starts_with(name, "value_head.") ? result.kept_init : missing).push_back(name);
      continue;
    }
    check_stored_tensor(dir, name, it->second.sizes(), it->second.scalar_type(), item.value().sizes(), kFromConfig);
    used.insert(name);
  }
  if (!missing.empty()) throw_missing(dir, missing);
  for (const auto& item : tensors)  // weights that change the maths cannot be left out silently
    if (used.count(item.first) == 0 && (item.first.find("self_attn.q_norm.") != std::string::npos ||
                                        item.first.find("self_attn.k_norm.") != std::string::npos))
      throw UsageError(dir + ": tensor '" + item.first + "' " + shape_text(item.second.sizes()) +
                       " has no place in the model that config.json describes: its model_type has no q/k norms");
  torch::NoGradGuard no_grad;
  for (const auto& item : params) {
    const auto it = tensors.find(item.key());
    torch::Tensor param = item.value();
    if (it != tensors.end()) param.copy_(it->second);  // converts dtype and device
  }
  for (const auto& item : tensors)
    if (used.count(item.first) == 0) result.unused.push_back(item.first);
  return result;
}

HfWeightParts::HfWeightParts(const std::string& dir, bool allow_missing_value_head)
    : dir_(dir), reader_(SafetensorsReader::folder(dir)), allow_missing_value_head_(allow_missing_value_head) {
  bool prefixed = false;  // as add_backbone_prefix: a bare backbone's names lack "model."
  for (const std::string& name : reader_.names()) prefixed = prefixed || starts_with(name, "model.");
  strip_model_ = !prefixed && reader_.find("embed_tokens.weight") != nullptr;
}

std::string HfWeightParts::stored_name(const std::string& name) const {
  return strip_model_ && starts_with(name, "model.") ? name.substr(6) : name;
}

void HfWeightParts::check(const std::string& name, const torch::Tensor& param) const {
  const SafetensorsEntry* entry = reader_.find(stored_name(name));
  if (!entry) {
    if (allow_missing_value_head_ && starts_with(name, "value_head.")) return;  // keeps its seeded init
    throw_missing(dir_, {name});
  }
  check_stored_tensor(dir_, name, entry->shape, SafetensorsReader::dtype(*entry), param.sizes(), kFromConfig);
}

torch::Tensor HfWeightParts::part(const std::string& name, const torch::Tensor& param, int64_t first,
                                  int64_t count) const {
  const std::string stored = stored_name(name);
  if (!reader_.find(stored)) return param.detach().reshape({-1}).narrow(0, first, count);  // a value head, checked
  return reader_.read(stored, first, count).to(param.scalar_type());
}

bool is_hf_export_file(const std::string& name) {
  for (const char* file : kTokenizerFiles)
    if (name == file) return true;
  return name == "config.json" || name == "generation_config.json" || name == "model.safetensors" ||
         name == "model.safetensors.index.json" || name == "char_tokenizer.txt" || is_weight_shard(name) ||
         name == "adapter_config.json" || name == "adapter_model.safetensors";
}

void export_hf(const CausalLM& model, const ModelConfig& config, const std::string& out_dir, const Tokenizer& tokenizer,
               const std::string& tokenizer_dir, uint64_t max_shard_bytes) {
  const fs::path out(out_dir);
  fs::create_directories(out);
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : model->named_parameters(/*recurse=*/true)) {
    TORCH_CHECK(!is_lora_parameter(item.key()) || !*model->model->lora_enabled,
                "export_hf: merge the LoRA adapters first (merge_lora)");
    if (!is_lora_parameter(item.key())) tensors.emplace(item.key(), item.value().detach().to(torch::kCPU).contiguous());
  }
  check_describes(config, model->model->config);
  const bool tied = !model->lm_head;
  const std::string dtype = torch_dtype_name(model->model->embed_tokens->weight.scalar_type());
  remove_stale_weights(out);
  write_hf_weights(out, tensors, max_shard_bytes);
  write_json(out / "config.json", hf_config_json(config, model->model->vocab_size, tied, dtype, tokenizer));
  json generation = json::object();
  if (tokenizer.bos_id() >= 0) generation["bos_token_id"] = tokenizer.bos_id();
  if (tokenizer.eos_id() >= 0) generation["eos_token_id"] = tokenizer.eos_id();
  if (tokenizer.pad_id() >= 0) generation["pad_token_id"] = tokenizer.pad_id();
  write_json(out / "generation_config.json", generation);
  copy_tokenizer_files(tokenizer_dir, out);
}

}  // namespace ppo
