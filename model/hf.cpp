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

constexpr const char* kQwen2 = "Qwen2ForCausalLM";
constexpr const char* kLlama = "LlamaForCausalLM";

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

// "Qwen2ForCausalLM" | "LlamaForCausalLM", from "architectures" or else "model_type".
std::string hf_architecture(const FieldReader& f) {
  const std::string supported = std::string("supported: ") + kQwen2 + " | " + kLlama;
  const std::string model_type = f.string("model_type", "");
  if (!model_type.empty() && model_type != "qwen2" && model_type != "llama")
    f.fail("model_type", "is \"" + model_type + "\"; supported: qwen2 | llama");
  std::string arch;
  if (f.has("architectures")) {
    const json& a = f.j.at("architectures");
    if (!a.is_array() || a.size() != 1 || !a[0].is_string())
      f.fail("architectures", "must list exactly one architecture, got " + a.dump() + "; " + supported);
    arch = a[0].get<std::string>();
    if (arch != kQwen2 && arch != kLlama) f.fail("architectures", "names \"" + arch + "\"; " + supported);
  } else if (!model_type.empty()) {
    arch = model_type == "qwen2" ? kQwen2 : kLlama;
  } else {
    f.fail("architectures", "and \"model_type\" are both missing; " + supported);
  }
  if (!model_type.empty() && (model_type == "qwen2") != (arch == kQwen2))
    f.fail("model_type", "\"" + model_type + "\" contradicts architectures [\"" + arch + "\"]");
  return arch;
}

// rope_scaling null (or {"rope_type": "default"}) only. transformers >= 5 writes "rope_parameters" {rope_type,
// rope_theta} instead; returns its rope_theta when present.
std::optional<double> check_rope(const FieldReader& f) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!f.has(key)) continue;
    const json& r = f.j.at(key);
    if (!r.is_object()) f.fail(key, "must be null or an object, got " + r.dump());
    const json type_field = r.contains("rope_type") ? r.at("rope_type")
                            : r.contains("type")    ? r.at("type")
                                                    : json("default");
    const std::string type = type_field.is_string() ? type_field.get<std::string>() : type_field.dump();
    if (type != "default") f.fail(key, "is " + r.dump() + "; only unscaled rotary embeddings (null) are supported");
    if (r.contains("rope_theta")) {
      if (!r.at("rope_theta").is_number()) f.fail(key, "has a non-numeric rope_theta: " + r.dump());
      return r.at("rope_theta").get<double>();
    }
  }
  return std::nullopt;
}

// The features the transformer of model/transformer.h does not have.
void check_supported(const FieldReader& f, const ModelConfig& c) {
  const std::string act = f.string("hidden_act", "silu");
  if (act != "silu") f.fail("hidden_act", "is \"" + act + "\"; only \"silu\" (SwiGLU) is supported");
  if (f.boolean("use_sliding_window", false))
    f.fail("use_sliding_window", "is true; sliding-window attention is not supported");
  if (f.boolean("mlp_bias", false)) f.fail("mlp_bias", "is true; MLP projections without bias only");
  if (f.has("head_dim") && f.integer("head_dim") != c.hidden_size / c.num_heads)
    f.fail("head_dim", "is " + std::to_string(f.integer("head_dim")) + "; only hidden_size / num_attention_heads (" +
                           std::to_string(c.hidden_size / c.num_heads) + ") is supported");
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

json hf_config_json(const ModelConfig& c, int64_t vocab_size, bool tied, const std::string& dtype,
                    const Tokenizer& tokenizer) {
  const bool qwen2 = c.attention_bias;
  json j = {
      {"architectures", json::array({qwen2 ? kQwen2 : kLlama})},
      {"attention_dropout", 0.0},
      {"bos_token_id", optional_id(tokenizer.bos_id())},
      {"eos_token_id", optional_id(tokenizer.eos_id())},
      {"hidden_act", "silu"},
      {"hidden_size", c.hidden_size},
      {"initializer_range", c.init_std},
      {"intermediate_size", c.intermediate_size},
      {"max_position_embeddings", c.max_position_embeddings},
      {"model_type", qwen2 ? "qwen2" : "llama"},
      {"num_attention_heads", c.num_heads},
      {"num_hidden_layers", c.num_layers},
      {"num_key_value_heads", c.num_kv_heads},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_scaling", nullptr},
      {"rope_theta", c.rope_theta},
      {"tie_word_embeddings", tied},
      {"torch_dtype", dtype},
      {"use_cache", true},
      {"vocab_size", vocab_size},
  };
  if (qwen2) {
    j["max_window_layers"] = c.num_layers;
    j["sliding_window"] = nullptr;
    j["use_sliding_window"] = false;
  } else {
    j["attention_bias"] = false;
    j["head_dim"] = c.hidden_size / c.num_heads;
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
  }
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
  HfModelInfo info;
  info.architecture = hf_architecture(f);
  ModelConfig& c = info.config;
  c = base;
  c.hidden_size = f.integer("hidden_size");
  c.intermediate_size = f.integer("intermediate_size");
  c.num_layers = f.integer("num_hidden_layers");
  c.num_heads = f.integer("num_attention_heads");
  c.num_kv_heads = f.integer("num_key_value_heads", c.num_heads);
  c.vocab_size = f.integer("vocab_size");
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  c.rope_theta = f.number("rope_theta", 10000.0);
  if (auto theta = check_rope(f)) c.rope_theta = *theta;
  c.max_position_embeddings =
      f.integer("max_position_embeddings", info.architecture == kQwen2 ? int64_t{32768} : int64_t{2048});
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.attention_bias = info.architecture == kQwen2 ? true : f.boolean("attention_bias", false);
  if (c.num_heads <= 0) f.fail("num_attention_heads", "must be positive");
  check_supported(f, c);
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
