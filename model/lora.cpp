// See model/lora.h.
#include "model/lora.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include <ATen/CPUGeneratorImpl.h>

#include "common/error.h"
#include "common/files.h"
#include "common/host_memory.h"
#include "common/json.h"
#include "common/random.h"
#include "common/strings.h"
#include "model/model_shape.h"
#include "model/moe.h"
#include "model/safetensors.h"

namespace ppo {
namespace {

// The largest actor.lora.rank (and critic.lora.rank) before the model's shape is known: far above any use.
constexpr int64_t kMaxLoraRank = int64_t{1} << 16;

// U(-bound, bound) from a generator seeded by (seed, name), in float32, copied into `p`.
void seeded_uniform(torch::Tensor p, double bound, int64_t seed, const std::string& name) {
  auto generator = at::detail::createCPUGenerator(splitmix64(static_cast<uint64_t>(seed) ^ fnv1a(name)));
  p.copy_(torch::empty(p.sizes(), torch::kFloat).uniform_(-bound, bound, generator));
}

// The ppo.cpp name of an adapter beside the linear `linear` ("q_proj" -> "q_lora").
std::string adapter_name(const std::string& linear) {
  return linear.substr(0, linear.size() - std::string("_proj").size()) + "_lora";
}

// "model.layers.0.self_attn.q_lora.lora_A.weight" -> "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
// an expert adapter as PEFT's nested ParamWrappers name it (peft_adapter_tensors in model/lora.h), `nested` when
// both expert weights have adapters.
std::string peft_name(const std::string& name, bool nested) {
  std::string out = name;
  const std::string gate_up = ".experts.gate_up_lora.", down = ".experts.down_lora.";
  if (size_t at = out.find(gate_up); at != std::string::npos) {
    out.replace(at, gate_up.size(), nested ? ".experts.base_layer." : ".experts.");
  } else if (at = out.find(down); at != std::string::npos) {
    out.replace(at, down.size(), ".experts.");
  } else if (at = out.find("_lora.lora_"); at != std::string::npos) {
    out.replace(at, std::string("_lora").size(), "_proj");
  }
  return "base_model.model." + out;
}

// Whether both expert weights of `model` have adapters (PEFT nests gate_up_proj's under down_proj's).
bool nested_expert_adapters(const torch::nn::Module& model) {
  bool gate_up = false, down = false;
  for (const auto& item : model.named_parameters()) {
    gate_up = gate_up || item.key().find(".experts.gate_up_lora.") != std::string::npos;
    down = down || item.key().find(".experts.down_lora.") != std::string::npos;
  }
  return gate_up && down;
}

// Every (layer, linear name, linear, adapter slot) of a backbone.
template <class F>
void for_each_target(TransformerImpl& backbone, F&& f) {
  for (size_t i = 0; i < backbone.layers->size(); ++i) {
    auto& layer = *backbone.layers->ptr<DecoderLayerImpl>(i);
    auto& a = *layer.self_attn;
    const auto layer_index = static_cast<int64_t>(i);
    f(layer_index, a, "q_proj", a.q_proj, a.q_lora);
    f(layer_index, a, "k_proj", a.k_proj, a.k_lora);
    f(layer_index, a, "v_proj", a.v_proj, a.v_lora);
    f(layer_index, a, "o_proj", a.o_proj, a.o_lora);
    if (!layer.mlp) continue;  // an MoE layer's experts are parameters, not linear modules (as in transformers 5)
    auto& m = *layer.mlp;
    f(layer_index, m, "gate_proj", m.gate_proj, m.gate_lora);
    f(layer_index, m, "up_proj", m.up_proj, m.up_lora);
    f(layer_index, m, "down_proj", m.down_proj, m.down_lora);
  }
}

// Every (layer, weight name, stacked weight, adapter slot) of the experts of `backbone`'s MoE layers.
template <class F>
void for_each_expert_target(TransformerImpl& backbone, F&& f) {
  for (size_t i = 0; i < backbone.layers->size(); ++i) {
    auto& layer = *backbone.layers->ptr<DecoderLayerImpl>(i);
    if (!layer.moe) continue;
    auto& experts = *layer.moe->experts;
    const auto layer_index = static_cast<int64_t>(i);
    f(layer_index, experts, "gate_up_proj", experts.gate_up_proj, experts.gate_up_lora);
    f(layer_index, experts, "down_proj", experts.down_proj, experts.down_lora);
  }
}

// A new adapter `in` -> `out` of rank `rank` registered as `owner`'s "<name>_lora" (for the weight "<name>_proj" of
// `like`'s dtype and device), initialised as PEFT does: A Kaiming-uniform (bound 1 / sqrt(in)), B zero, or with
// init_lora_weights off nn.Linear's own (bound 1 / sqrt(rank)). `prefix` names its generators.
LoraAdapter new_adapter(torch::nn::Module& owner, const std::string& name, int64_t in, int64_t out, int64_t rank,
                        const LoraConfig& lora, const TransformerImpl& backbone, const torch::Tensor& like,
                        int64_t seed, const std::string& prefix) {
  auto adapter =
      owner.register_module(adapter_name(name), LoraAdapter(in, out, rank, lora_scaling(lora), lora.dropout));
  adapter->enabled = backbone.lora_enabled;
  adapter->to(like.device(), like.scalar_type());
  seeded_uniform(adapter->lora_A->weight, 1.0 / std::sqrt(static_cast<double>(in)), seed, prefix + ".lora_A");
  if (lora.init_lora_weights) {
    adapter->lora_B->weight.zero_();
  } else {
    seeded_uniform(adapter->lora_B->weight, 1.0 / std::sqrt(static_cast<double>(rank)), seed, prefix + ".lora_B");
  }
  return adapter;
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

const std::vector<std::string>& lora_module_names() {
  static const std::vector<std::string> names = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                 "gate_proj", "up_proj", "down_proj"};
  return names;
}

std::vector<std::string> lora_targets(const LoraConfig& lora, const std::string& key) {
  usage_check(
      lora.rank >= 0 && lora.rank <= kMaxLoraRank,
      key + ".rank=" + std::to_string(lora.rank) + " is out of range: 0 (off) to " + std::to_string(kMaxLoraRank));
  usage_check(lora.alpha > 0 && std::isfinite(lora.alpha), key + ".alpha must be a number > 0");
  usage_check(lora.dropout >= 0 && lora.dropout < 1, key + ".dropout must be in [0, 1)");
  const auto& all = lora_module_names();
  bool all_linear = false;
  for (const std::string& name : lora.target_modules) {  // every name is checked, wherever all-linear stands
    if (name == "all-linear") {
      all_linear = true;
    } else if (std::find(all.begin(), all.end(), name) == all.end()) {
      throw UsageError(key + ".target_modules: the model has no linear layer '" + name + "'; valid: all-linear, " +
                       join(all, ", "));
    }
  }
  if (all_linear) return all;
  std::vector<std::string> out;
  for (const std::string& name : all)
    if (std::find(lora.target_modules.begin(), lora.target_modules.end(), name) != lora.target_modules.end())
      out.push_back(name);
  usage_check(!out.empty() || !lora.target_parameters.empty(),
              key + ".target_modules is empty: name at least one layer, or all-linear (or experts in " + key +
                  ".target_parameters)");
  return out;
}

const std::vector<std::string>& lora_expert_parameter_names() {
  static const std::vector<std::string> names = {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"};
  return names;
}

std::map<std::string, std::pair<int64_t, int64_t>> lora_expert_shapes(const ModelConfig& m) {
  const int64_t D = m.hidden_size, I = expert_intermediate_size(m);
  return {{"mlp.experts.gate_up_proj", {2 * I, D}}, {"mlp.experts.down_proj", {D, I}}};
}

std::vector<std::string> lora_expert_targets(const LoraConfig& lora, const std::string& key) {
  const auto& all = lora_expert_parameter_names();
  const auto names = [&](const std::string& entry, const std::string& name) {
    return !entry.empty() && (name == entry || ends_with(name, "." + entry));
  };
  for (const std::string& entry : lora.target_parameters)
    usage_check(std::any_of(all.begin(), all.end(), [&](const std::string& name) { return names(entry, name); }),
                key + ".target_parameters: '" + entry + "' names no expert weight; valid: " + join(all, ", "));
  std::vector<std::string> out;
  for (const std::string& name : all)
    if (std::any_of(lora.target_parameters.begin(), lora.target_parameters.end(),
                    [&](const std::string& entry) { return names(entry, name); }))
      out.push_back(name);
  usage_check(out.empty() || lora.dropout == 0,
              key + ".dropout=" + std::to_string(lora.dropout) + " with " + key +
                  ".target_parameters: an expert adapter has no dropout (as PEFT's ParamWrapper); set " + key +
                  ".dropout=0");
  return out;
}

std::map<std::string, std::pair<int64_t, int64_t>> lora_target_shapes(const ModelConfig& m) {
  const int64_t D = m.hidden_size, I = m.intermediate_size;
  const int64_t q = m.num_heads * head_dim_of(m), kv = m.num_kv_heads * head_dim_of(m);
  return {{"q_proj", {q, D}},    {"k_proj", {kv, D}}, {"v_proj", {kv, D}},  {"o_proj", {D, q}},
          {"gate_proj", {I, D}}, {"up_proj", {I, D}}, {"down_proj", {D, I}}};
}

namespace {

// A rank above the smaller side of each targeted [out, in] in `shapes` is a UsageError naming `key` and `list`.
void check_rank(const LoraConfig& lora, const std::vector<std::string>& targets,
                const std::map<std::string, std::pair<int64_t, int64_t>>& shapes, const std::string& key,
                const std::string& list) {
  for (const std::string& name : targets) {
    const auto [out, in] = shapes.at(name);
    const int64_t side = std::min(out, in);
    usage_check(lora.rank <= side, key + ".rank=" + std::to_string(lora.rank) + " is above the smaller side of " +
                                       name + " [" + std::to_string(out) + ", " + std::to_string(in) +
                                       "]: a LoRA update of that layer has rank at most " + std::to_string(side) +
                                       "; set " + key + ".rank <= " + std::to_string(side) + " or leave it out of " +
                                       list);
  }
}

}  // namespace

void check_lora(const LoraConfig& lora, const ModelConfig& model, const std::string& key) {
  const std::vector<std::string> targets = lora_targets(lora, key);
  const std::vector<std::string> experts = lora_expert_targets(lora, key);
  if (lora.rank == 0) return;
  check_rank(lora, targets, lora_target_shapes(model), key, "target_modules");
  if (experts.empty()) return;
  usage_check(model.moe.num_experts > 0, key + ".target_parameters names experts and the model has none " +
                                             "(model.moe.num_experts is 0): leave it empty");
  check_rank(lora, experts, lora_expert_shapes(model), key, "target_parameters");
}

double lora_parameters(const LoraConfig& lora, const ModelConfig& model) {
  if (lora.rank == 0) return 0;
  const auto shapes = lora_target_shapes(model);
  const double layers = static_cast<double>(model.num_layers);
  const double dense_layers = layers - static_cast<double>(moe_layer_count(model));  // MLP targets: dense layers only
  double total = 0;
  for (const std::string& name : lora_targets(lora, "lora")) {
    const auto [out, in] = shapes.at(name);
    const bool mlp = name == "gate_proj" || name == "up_proj" || name == "down_proj";
    total += static_cast<double>(lora.rank) * static_cast<double>(in + out) * (mlp ? dense_layers : layers);
  }
  const auto expert_shapes = lora_expert_shapes(model);
  const double experts = static_cast<double>(model.moe.num_experts) * (layers - dense_layers);
  for (const std::string& name : lora_expert_targets(lora, "lora")) {
    const auto [out, in] = expert_shapes.at(name);
    total += static_cast<double>(lora.rank) * static_cast<double>(in + out) * experts;
  }
  return total;
}

void check_lora_fits_memory(const ModelConfig& model, int64_t vocab_size, const LoraConfig& lora,
                            const std::string& key) {
  if (lora.rank == 0) return;
  const double base = model_parameters(model, vocab_size), adapters = lora_parameters(lora, model);
  const double available = available_memory_bytes(), gib = 1 << 30;
  if (available < 0 || 4 * (base + adapters) <= available) return;
  std::ostringstream text;
  text.precision(3);
  text << key << ".rank=" << lora.rank << ": the model has " << base << " parameters and its adapters " << adapters
       << ", " << 4 * (base + adapters) / gib << " GiB in float32 while they are built, and this machine has "
       << available / gib << " GiB of memory available: lower " << key << ".rank or narrow " << key
       << ".target_modules";
  throw UsageError(text.str());
}

double lora_scaling(const LoraConfig& lora) {
  const double rank = static_cast<double>(lora.rank);
  return lora.use_rslora ? lora.alpha / std::sqrt(rank) : lora.alpha / rank;
}

void add_lora(TransformerImpl& backbone, const LoraConfig& lora, const std::string& key, int64_t seed) {
  check_lora(lora, backbone.config, key);
  const std::vector<std::string> targets = lora_targets(lora, key), experts = lora_expert_targets(lora, key);
  if (lora.rank == 0) return;
  torch::NoGradGuard no_grad;
  for_each_target(backbone, [&](int64_t layer, torch::nn::Module& owner, const std::string& name,
                                torch::nn::Linear& linear, LoraAdapter& adapter) {
    if (!contains(targets, name)) return;
    const std::string prefix = "model.layers." + std::to_string(layer) + "." + adapter_name(name);
    adapter = new_adapter(owner, name, linear->weight.size(1), linear->weight.size(0), lora.rank, lora, backbone,
                          linear->weight, seed, prefix);
  });
  // An expert weight [E, out, in]: one adapter of rank r E, as PEFT's ParamWrapper (its A rows expert by expert).
  for_each_expert_target(backbone, [&](int64_t layer, torch::nn::Module& owner, const std::string& name,
                                       const torch::Tensor& weight, LoraAdapter& adapter) {
    if (!contains(experts, "mlp.experts." + name)) return;
    const std::string prefix = "model.layers." + std::to_string(layer) + ".mlp.experts." + adapter_name(name);
    adapter = new_adapter(owner, name, weight.size(2), weight.size(1), lora.rank * weight.size(0), lora, backbone,
                          weight, seed, prefix);
  });
}

bool has_lora(const TransformerImpl& backbone) {
  for (const auto& item : backbone.named_parameters())
    if (is_lora_parameter(item.key())) return true;
  return false;
}

bool has_lora_dropout(const TransformerImpl& backbone) {
  for (const auto& module : backbone.modules(/*include_self=*/false))
    if (const auto* adapter = module->as<LoraAdapterImpl>(); adapter && adapter->dropout > 0) return true;
  return false;
}

bool is_lora_parameter(const std::string& name) {
  return name.find("_lora.lora_") != std::string::npos;
}

void merge_lora(TransformerImpl& backbone) {
  torch::NoGradGuard no_grad;
  for_each_target(
      backbone, [&](int64_t, torch::nn::Module&, const std::string&, torch::nn::Linear& linear, LoraAdapter& adapter) {
        if (!adapter) return;
        const torch::Tensor delta =
            torch::matmul(adapter->lora_B->weight.to(torch::kFloat), adapter->lora_A->weight.to(torch::kFloat)) *
            adapter->scaling;
        linear->weight.copy_(linear->weight.to(torch::kFloat) + delta);
      });
  for_each_expert_target(
      backbone, [&](int64_t, torch::nn::Module&, const std::string&, torch::Tensor& weight, LoraAdapter& adapter) {
        if (!adapter) return;
        const ExpertFactors f = expert_factors(*adapter, weight.size(0));
        weight.copy_(weight.to(torch::kFloat) + torch::bmm(f.B.to(torch::kFloat), f.A.to(torch::kFloat)) * f.scaling);
      });
  *backbone.lora_enabled = false;
}

std::map<std::string, torch::Tensor> peft_adapter_tensors(const torch::nn::Module& model) {
  const bool nested = nested_expert_adapters(model);
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model.named_parameters())
    if (is_lora_parameter(item.key())) out[peft_name(item.key(), nested)] = item.value().detach().cpu();
  return out;
}

void save_peft_adapter(const torch::nn::Module& model, const LoraConfig& lora, const std::string& dir,
                       const std::string& base_model_name) {
  std::vector<std::string> targets = lora_targets(lora, "actor.lora");
  std::filesystem::create_directories(dir);
  nlohmann::json config = {{"peft_type", "LORA"},
                           {"task_type", "CAUSAL_LM"},
                           {"r", lora.rank},
                           {"lora_alpha", lora.alpha},
                           {"use_rslora", lora.use_rslora},
                           {"lora_dropout", lora.dropout},
                           {"target_modules", targets},
                           {"target_parameters", nullptr},
                           {"bias", "none"},
                           {"fan_in_fan_out", false},
                           {"inference_mode", true},
                           {"init_lora_weights", lora.init_lora_weights},
                           {"modules_to_save", nullptr},
                           {"base_model_name_or_path", base_model_name}};
  if (const auto experts = lora_expert_targets(lora, "actor.lora"); !experts.empty())
    config["target_parameters"] = experts;
  write_file_atomic(dir + "/adapter_config.json", config.dump(2) + "\n");
  save_safetensors(dir + "/adapter_model.safetensors", peft_adapter_tensors(model), {{"format", "pt"}});
}

namespace {

// adapter_config.json's keys (PEFT 0.21's LoraConfig) that ppo.cpp reads, or that do not change the adapted model's
// maths: identification, inference flags, and initialisation schemes (the saved tensors are what they produced).
const std::set<std::string>& peft_keys_read_or_inert() {
  static const std::set<std::string> keys = {"peft_type",
                                             "task_type",
                                             "auto_mapping",
                                             "peft_version",
                                             "base_model_name_or_path",
                                             "revision",
                                             "inference_mode",
                                             "r",
                                             "lora_alpha",
                                             "use_rslora",
                                             "lora_dropout",
                                             "target_modules",
                                             "target_parameters",
                                             "init_lora_weights",
                                             "loftq_config",
                                             "eva_config",
                                             "corda_config",
                                             "lora_ga_config",
                                             "megatron_core",
                                             "qalora_group_size",
                                             "runtime_config",
                                             "ensure_weight_tying"};
  return keys;
}

// A PEFT setting at its default: null, false, "none", or an empty list, object or string.
bool peft_default(const nlohmann::json& value) {
  if (value.is_null()) return true;
  if (value.is_boolean()) return !value.get<bool>();
  if (value.is_string()) return value.get<std::string>().empty() || value.get<std::string>() == "none";
  if (value.is_array() || value.is_object()) return value.empty();
  return false;
}

// Every key of adapter_config.json that would change the maths (use_dora, modules_to_save, rank_pattern, ...), or
// that PEFT 0.21 does not have, must be at its default: ppo.cpp implements plain LoRA and rsLoRA only.
void check_peft_settings(const nlohmann::json& config, const std::string& path) {
  for (const auto& [key, value] : config.items()) {
    if (peft_keys_read_or_inert().count(key) || peft_default(value)) continue;
    throw UsageError(path + ": " + key + " is " + value.dump() +
                     ", which ppo.cpp does not implement (it reads plain LoRA and rsLoRA adapters: r, lora_alpha, "
                     "use_rslora, target_modules); merge or convert the adapter in PEFT first");
  }
}

// A JSON string or list of strings as a list (anything else: empty).
std::vector<std::string> string_list(const nlohmann::json& value) {
  std::vector<std::string> out;
  if (value.is_string()) out.push_back(value.get<std::string>());
  if (value.is_array())
    for (const auto& item : value)
      if (item.is_string()) out.push_back(item.get<std::string>());
  return out;
}

}  // namespace

void load_peft_adapter(torch::nn::Module& model, const LoraConfig& lora, const std::string& dir) {
  const std::string config_path = dir + "/adapter_config.json", weights_path = dir + "/adapter_model.safetensors";
  const nlohmann::json config = read_json_file(config_path);
  usage_check(config.is_object() && config.value("peft_type", nlohmann::json()) == "LORA",
              config_path + ": not a PEFT LoRA adapter (peft_type is not LORA)");
  check_peft_settings(config, config_path);
  usage_check(config.contains("r") && config["r"].is_number_integer() && config["r"].get<int64_t>() == lora.rank,
              config_path + ": r is " + (config.contains("r") ? config["r"].dump() : "missing") +
                  ", actor.lora.rank is " + std::to_string(lora.rank) + ": set actor.lora.rank to the adapter's");
  usage_check(config.contains("lora_alpha") && config["lora_alpha"].is_number() &&
                  std::abs(config["lora_alpha"].get<double>() - lora.alpha) <= 1e-9 * lora.alpha,
              config_path + ": lora_alpha is " +
                  (config.contains("lora_alpha") ? config["lora_alpha"].dump() : "missing") + ", actor.lora.alpha is " +
                  std::to_string(lora.alpha) + ": set actor.lora.alpha to the adapter's");
  const nlohmann::json rslora = config.value("use_rslora", nlohmann::json(false));
  usage_check(rslora.is_boolean() && rslora.get<bool>() == lora.use_rslora,
              config_path + ": use_rslora is " + rslora.dump() + ", actor.lora.use_rslora is " +
                  (lora.use_rslora ? "true" : "false") + ": set actor.lora.use_rslora to the adapter's");
  const nlohmann::json targets = config.value("target_modules", nlohmann::json()),
                       expert_targets = config.value("target_parameters", nlohmann::json());
  LoraConfig as_theirs = lora;
  as_theirs.target_modules = string_list(targets);
  as_theirs.target_parameters = string_list(expert_targets);
  std::vector<std::string> resolved, resolved_experts;
  try {
    resolved = lora_targets(as_theirs, config_path);
    resolved_experts = lora_expert_targets(as_theirs, config_path);
  } catch (const UsageError& e) {
    throw UsageError(config_path + ": target_modules " + targets.dump() + " and target_parameters " +
                     expert_targets.dump() + " are not layers of this model (" + e.what() + ")");
  }
  usage_check(resolved == lora_targets(lora, "actor.lora"),
              config_path + ": target_modules " + targets.dump() +
                  " differ from actor.lora.target_modules: set them to the adapter's");
  usage_check(resolved_experts == lora_expert_targets(lora, "actor.lora"),
              config_path + ": target_parameters " + expert_targets.dump() +
                  " differ from actor.lora.target_parameters: set them to the adapter's");
  check_regular_file(weights_path);
  const std::map<std::string, torch::Tensor> tensors = load_safetensors(weights_path);
  torch::NoGradGuard no_grad;
  std::set<std::string> used;
  const bool nested = nested_expert_adapters(model);
  for (auto& item : model.named_parameters()) {
    if (!is_lora_parameter(item.key())) continue;
    const std::string name = peft_name(item.key(), nested);
    auto it = tensors.find(name);
    if (it == tensors.end()) {  // PEFT writes "lora_A.weight"; some tools keep the adapter's name ("lora_A.default")
      std::string with_default = name;
      with_default.insert(with_default.rfind(".weight"), ".default");
      it = tensors.find(with_default);
    }
    usage_check(it != tensors.end(), weights_path + ": no tensor " + name);
    usage_check(it->second.sizes() == item.value().sizes(),
                weights_path + ": " + name + " has shape " + c10::str(it->second.sizes()) + ", this model's " +
                    c10::str(item.value().sizes()) + ": the adapter was made for a model of another shape");
    item.value().copy_(it->second.to(item.value().scalar_type()));
    used.insert(it->first);
  }
  for (const auto& [name, tensor] : tensors)  // a tensor left over would be an adapter silently dropped
    usage_check(used.count(name) == 1, weights_path + ": tensor " + name +
                                           " is not an adapter of this model's actor.lora.target_modules (" +
                                           join(lora_targets(lora, "actor.lora"), ", ") + ")");
}

}  // namespace ppo
