// Hugging Face folders <-> parameters (config.json itself: model/hf_config.cpp). References: transformers'
// modeling_utils.py save_pretrained / load_state_dict (file names, sharding, the safetensors metadata
// {"format": "pt"} that load_state_dict checks).
#include "model/hf.h"

#include <nlohmann/json.hpp>

#include <algorithm>
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
#include "model/hf_config.h"
#include "model/hf_experts.h"
#include "model/lora.h"
#include "model/model_shape.h"
#include "model/safetensors.h"

namespace ppo {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

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

// A sequence classifier's score.weight [labels, D] (no bias) is a ValueModel's value_head: its weight, and a bias of
// zeros, where the module has one and the folder holds no value_head of its own.
void map_score_head(std::map<std::string, torch::Tensor>& tensors, const torch::nn::Module& module) {
  const auto score = tensors.find("score.weight");
  if (score == tensors.end() || tensors.count("value_head.weight")) return;
  const auto params = module.named_parameters(/*recurse=*/true);
  if (!params.contains("value_head.weight")) return;
  tensors["value_head.weight"] = score->second;
  if (params.contains("value_head.bias")) tensors["value_head.bias"] = torch::zeros({score->second.size(0)});
  tensors.erase(score);
}

std::string list_names(const std::vector<std::string>& names) {
  std::string s =
      join(std::vector<std::string>(names.begin(), names.begin() + std::min<size_t>(names.size(), 5)), ", ");
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

namespace {

constexpr const char* kFromConfig = " (from config.json and the tokenizer)";

[[noreturn]] void throw_missing(const std::string& dir, const std::vector<std::string>& missing) {
  const std::string hint = std::find(missing.begin(), missing.end(), "lm_head.weight") != missing.end()
                               ? " (lm_head.weight is needed because tie_word_embeddings is false)"
                               : "";
  throw UsageError(dir + ": missing tensor(s) " + list_names(missing) + hint);
}

// Weights that change the maths cannot be left out silently: a q/k norm of a folder whose model has none (a Qwen3
// checkpoint under a Llama config.json).
void refuse_stray_norm(const std::string& dir, const std::string& name, c10::IntArrayRef shape) {
  if (name.find("self_attn.q_norm.") != std::string::npos || name.find("self_attn.k_norm.") != std::string::npos)
    throw UsageError(dir + ": tensor '" + name + "' " + shape_text(shape) +
                     " has no place in the model that config.json describes: its model_type has no q/k norms");
}

}  // namespace

HfLoadResult load_hf_weights(torch::nn::Module& module, const std::string& dir, bool allow_missing_value_head) {
  std::map<std::string, torch::Tensor> tensors = load_safetensors_dir(dir);
  add_backbone_prefix(tensors);
  map_score_head(tensors, module);
  HfLoadResult result;
  std::vector<std::string> missing;
  std::set<std::string> used;
  const auto params = module.named_parameters(/*recurse=*/true);
  const auto has = [&](const std::string& name) { return tensors.count(name) > 0; };
  std::map<std::string, std::vector<StoredPiece>> sources;  // each parameter's stored tensors (model/hf_experts.h)
  for (const auto& item : params) {                         // check everything before changing anything
    const std::string& name = item.key();
    const std::vector<StoredPiece> pieces = stored_pieces(name, item.value().sizes(), has);
    if (pieces.size() == 1 && !has(pieces[0].name)) {
      (allow_missing_value_head && starts_with(name, "value_head.") ? result.kept_init : missing).push_back(name);
      continue;
    }
    for (const StoredPiece& piece : pieces) {
      const auto it = tensors.find(piece.name);
      if (it == tensors.end()) {
        missing.push_back(piece.name);
        continue;
      }
      check_stored_tensor(dir, piece.name, it->second.sizes(), it->second.scalar_type(), piece.shape, kFromConfig);
      used.insert(piece.name);
    }
    sources[name] = pieces;
  }
  if (!missing.empty()) throw_missing(dir, missing);
  for (const auto& item : tensors)
    if (used.count(item.first) == 0) refuse_stray_norm(dir, item.first, item.second.sizes());
  torch::NoGradGuard no_grad;
  for (const auto& item : params) {
    const auto it = sources.find(item.key());
    if (it == sources.end()) continue;
    torch::Tensor param = item.value();
    if (it->second.size() == 1) {
      param.copy_(tensors.at(it->second[0].name));  // converts dtype and device
      continue;
    }
    std::vector<torch::Tensor> flat;
    for (const StoredPiece& piece : it->second) flat.push_back(tensors.at(piece.name).reshape({-1}));
    param.copy_(torch::cat(flat).view(param.sizes()));
  }
  for (const auto& item : tensors)
    if (used.count(item.first) == 0) result.unused.push_back(item.first);
  return result;
}

HfWeightParts::HfWeightParts(const std::string& dir, bool allow_missing_value_head, bool qk_norm)
    : dir_(dir), reader_(SafetensorsReader::folder(dir)), allow_missing_value_head_(allow_missing_value_head) {
  if (!qk_norm)
    for (const std::string& name : reader_.names()) refuse_stray_norm(dir, name, reader_.find(name)->shape);
  bool prefixed = false;  // as add_backbone_prefix: a bare backbone's names lack "model."
  for (const std::string& name : reader_.names()) prefixed = prefixed || starts_with(name, "model.");
  strip_model_ = !prefixed && reader_.find("embed_tokens.weight") != nullptr;
  score_head_ = reader_.find("score.weight") != nullptr && reader_.find("value_head.weight") == nullptr;
}

std::string HfWeightParts::stored_name(const std::string& name) const {
  if (score_head_ && name == "value_head.weight") return "score.weight";
  return strip_model_ && starts_with(name, "model.") ? name.substr(6) : name;
}

std::vector<StoredPiece> HfWeightParts::pieces(const std::string& name, const torch::Tensor& param) const {
  std::vector<StoredPiece> pieces =
      stored_pieces(name, param.sizes(), [&](const std::string& n) { return reader_.find(stored_name(n)) != nullptr; });
  for (StoredPiece& piece : pieces) piece.name = stored_name(piece.name);
  return pieces;
}

void HfWeightParts::check(const std::string& name, const torch::Tensor& param) const {
  if (score_head_ && name == "value_head.bias") return;  // zero: the score head has none
  const std::vector<StoredPiece> stored = pieces(name, param);
  for (const StoredPiece& piece : stored) {
    const SafetensorsEntry* entry = reader_.find(piece.name);
    if (!entry) {
      if (stored.size() == 1 && allow_missing_value_head_ && starts_with(name, "value_head.")) return;  // its init
      throw_missing(dir_, {stored.size() == 1 ? name : piece.name});
    }
    check_stored_tensor(dir_, piece.name, entry->shape, SafetensorsReader::dtype(*entry), piece.shape, kFromConfig);
  }
}

torch::Tensor HfWeightParts::part(const std::string& name, const torch::Tensor& param, int64_t first,
                                  int64_t count) const {
  if (score_head_ && name == "value_head.bias") return torch::zeros({count}, param.options());
  const std::vector<StoredPiece> stored = pieces(name, param);
  if (stored.size() == 1 && !reader_.find(stored[0].name))
    return param.detach().reshape({-1}).narrow(0, first, count);  // a value head, checked
  std::vector<torch::Tensor> parts;  // the pieces' elements that fall in [first, first + count)
  int64_t at = 0;
  for (const StoredPiece& piece : stored) {
    int64_t size = 1;
    for (const int64_t d : piece.shape) size *= d;
    const int64_t from = std::max(first, at), to = std::min(first + count, at + size);
    if (from < to) parts.push_back(reader_.read(piece.name, from - at, to - from).to(param.scalar_type()));
    at += size;
  }
  return parts.size() == 1 ? parts[0] : torch::cat(parts);
}

bool is_hf_export_file(const std::string& name) {
  for (const char* file : kTokenizerFiles)
    if (name == file) return true;
  return name == "config.json" || name == "generation_config.json" || name == "model.safetensors" ||
         name == "model.safetensors.index.json" || name == "char_tokenizer.txt" || is_weight_shard(name) ||
         name == "adapter_config.json" || name == "adapter_model.safetensors";
}

void check_same_shape(const ModelConfig& expected, const ModelConfig& found, const std::string& context,
                      const std::string& found_text) {
  const std::vector<std::tuple<const char*, int64_t, int64_t>> fields = {
      {"hidden_size", expected.hidden_size, found.hidden_size},
      {"num_layers", expected.num_layers, found.num_layers},
      {"num_heads", expected.num_heads, found.num_heads},
      {"num_kv_heads", expected.num_kv_heads, found.num_kv_heads},
      {"intermediate_size", expected.intermediate_size, found.intermediate_size},
      {"attention_bias", expected.attention_bias, found.attention_bias},
      {"head_dim", head_dim_of(expected), head_dim_of(found)},
      {"qk_norm", expected.qk_norm, found.qk_norm},
      {"sliding_window", expected.sliding_window, found.sliding_window},
      {"moe.num_experts", expected.moe.num_experts, found.moe.num_experts},
      {"moe.num_experts_per_tok", expected.moe.num_experts_per_tok, found.moe.num_experts_per_tok},
      {"moe.intermediate_size", expert_intermediate_size(expected), expert_intermediate_size(found)},
      {"moe.norm_topk_prob", expected.moe.norm_topk_prob, found.moe.norm_topk_prob},
      {"moe.decoder_sparse_step", expected.moe.decoder_sparse_step, found.moe.decoder_sparse_step},
  };
  for (const auto& [key, given, actual] : fields)
    if (given != actual)
      throw UsageError(context + ": model." + key + " is " + std::to_string(given) + " but " + found_text + " " +
                       std::to_string(actual));
}

namespace {

// export_hf's folder from the tensors of a model of `config`'s shape (`built`: the shape it was built with).
void write_export(const fs::path& out, const std::map<std::string, torch::Tensor>& tensors, const ModelConfig& config,
                  const ModelConfig& built, int64_t vocab_size, bool tied, bool classifier, const Tokenizer& tokenizer,
                  const std::string& tokenizer_dir, uint64_t max_shard_bytes) {
  fs::create_directories(out);
  check_same_shape(config, built, "export", "the model was built with");
  const std::string dtype = torch_dtype_name(tensors.at("model.embed_tokens.weight").scalar_type());
  remove_stale_weights(out);
  write_hf_weights(out, tensors, max_shard_bytes);
  write_json(out / "config.json", hf_config_json(config, vocab_size, tied, dtype, tokenizer, classifier));
  json generation = json::object();
  if (tokenizer.bos_id() >= 0) generation["bos_token_id"] = tokenizer.bos_id();
  if (tokenizer.eos_id() >= 0) generation["eos_token_id"] = tokenizer.eos_id();
  if (tokenizer.pad_id() >= 0) generation["pad_token_id"] = tokenizer.pad_id();
  write_json(out / "generation_config.json", generation);
  copy_tokenizer_files(tokenizer_dir, out);
}

// The parameters of `module` on the host by name, its LoRA adapters merged first (merge_lora).
std::map<std::string, torch::Tensor> export_tensors(const torch::nn::Module& module, const TransformerImpl& backbone) {
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    TORCH_CHECK(!is_lora_parameter(item.key()) || !*backbone.lora_enabled,
                "export_hf: merge the LoRA adapters first (merge_lora)");
    if (!is_lora_parameter(item.key())) tensors.emplace(item.key(), item.value().detach().to(torch::kCPU).contiguous());
  }
  return tensors;
}

}  // namespace

void export_hf(const CausalLM& model, const ModelConfig& config, const std::string& out_dir, const Tokenizer& tokenizer,
               const std::string& tokenizer_dir, uint64_t max_shard_bytes) {
  std::map<std::string, torch::Tensor> tensors = export_tensors(*model, *model->model);
  unstack_experts(tensors, resolved_model_type(config));
  write_export(out_dir, tensors, config, model->model->config, model->model->vocab_size,
               /*tied=*/!model->lm_head, /*classifier=*/false, tokenizer, tokenizer_dir, max_shard_bytes);
}

void export_hf_classifier(const ValueModel& model, const ModelConfig& config, const std::string& out_dir,
                          const Tokenizer& tokenizer, const std::string& tokenizer_dir, uint64_t max_shard_bytes) {
  std::map<std::string, torch::Tensor> tensors = export_tensors(*model, *model->model);
  unstack_experts(tensors, resolved_model_type(config));
  tensors["score.weight"] = tensors.at("value_head.weight");
  tensors.erase("value_head.weight");
  tensors.erase("value_head.bias");
  write_export(out_dir, tensors, config, model->model->config, model->model->vocab_size, config.tie_word_embeddings,
               /*classifier=*/true, tokenizer, tokenizer_dir, max_shard_bytes);
}

}  // namespace ppo
