// See workers/worker.h.
#include "workers/worker.h"

#include <mutex>
#include <sstream>

#include "common/files.h"
#include "common/json.h"
#include "common/manifest.h"
#include "common/random.h"
#include "common/strings.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "parallel/tensor_sync.h"

namespace ppo {

std::unique_ptr<ShardedBuild> sharded_build(const ModelConfig& config, int64_t zero_stage, const LoraConfig& lora,
                                            const std::string& init_checkpoint, bool is_value_model) {
  if (zero_stage != 3 || lora.rank > 0 || !init_checkpoint.empty()) return nullptr;
  const Context& context = Context::get();
  return std::make_unique<ShardedBuild>(
      context.world_size(), context.rank(),
      config.path.empty() ? nullptr : std::make_unique<HfWeightParts>(config.path, is_value_model, config.qk_norm));
}

WorkerState::WorkerState(torch::nn::Module& model, TransformerImpl& backbone, torch::Device device,
                         const OffloadConfig& offload, const OptimConfig* optim, double grad_clip,
                         int64_t total_optimizer_steps, int64_t zero_stage, std::unique_ptr<ShardedBuild> built)
    : module_(model),
      device_(device),
      trainable_(optim != nullptr),
      lora_(has_lora(backbone)),
      dropout_(has_lora_dropout(backbone)) {
  TORCH_CHECK(!built || zero_stage == 3, "WorkerState: a sharded build is for stage 3");
  std::vector<torch::Tensor> params = model.parameters(), trained;
  for (const auto& item : model.named_parameters()) {
    const bool trains = optim && (!lora_ || trains_with_lora(item.key()));
    const int64_t numel = built ? built->numel(item.key()) : item.value().numel();  // built: no storage
    item.value().set_requires_grad(trains);
    parameter_count_ += numel;
    if (trains) {
      trained.push_back(item.value());
      names_.push_back(item.key());
      trained_count_ += numel;
    }
  }
  const bool sharded = optim ? zero_stage >= 1 : zero_stage == 3;
  if (sharded && zero_stage == 3) {  // sliced first, so that only the slices are placed
    shards_ = built ? std::make_unique<ShardedState>(std::move(*built), model, backbone, device_, offload, optim,
                                                     grad_clip, total_optimizer_steps, Context::get())
                    : std::make_unique<ShardedState>(model, backbone, zero_stage, device_, offload, optim, grad_clip,
                                                     total_optimizer_steps, Context::get());
    placement_ = std::make_unique<ParamPlacement>(shards_->placed_tensors(), device_, offload.param);
    return;
  }
  placement_ = std::make_unique<ParamPlacement>(params, device_, offload.param);
  if (sharded) {
    shards_ = std::make_unique<ShardedState>(model, backbone, zero_stage, device_, offload, optim, grad_clip,
                                             total_optimizer_steps, Context::get());
  } else if (optim) {
    optimizer_ = std::make_unique<Optimizer>(trained, *optim, grad_clip, total_optimizer_steps, offload);
  }
}

Updater& WorkerState::optimizer() {
  TORCH_CHECK(trainable_, "a frozen model has no optimizer");
  if (shards_) return *shards_;
  return *optimizer_;
}

int64_t WorkerState::model_state_bytes() const {
  if (trainable_) {  // the trained state, and a LoRA model's frozen base
    int64_t frozen = 0;
    for (const auto& p : module_.parameters())
      if (!p.requires_grad()) frozen += static_cast<int64_t>(p.nbytes());
    return frozen + (shards_ ? shards_->model_state_bytes() : optimizer_->model_state_bytes());
  }
  if (shards_) return shards_->parameter_bytes();
  int64_t bytes = 0;
  for (const auto& p : module_.parameters()) bytes += static_cast<int64_t>(p.nbytes());
  return bytes;
}

WorkerState::Phase::Phase(WorkerState& state, bool whole_model)
    : state_(state), on_(state.placement()), whole_(whole_model) {
  if (!state_.shards_) return;
  if (whole_) {
    state_.shards_->gather_all();
    if (state_.shards_->stage() != 3) return;  // below stage 3 every rank holds the whole model: nothing gathered
    state_.gathered_bytes_ = 0;
    for (const auto& p : state_.module_.parameters()) state_.gathered_bytes_ += static_cast<int64_t>(p.nbytes());
  } else {
    state_.shards_->gather_root();
  }
}

WorkerState::Phase::~Phase() {
  if (!state_.shards_) return;
  if (whole_) {
    state_.shards_->release_all();
  } else {
    state_.shards_->release_root();
  }
}

bool WorkerState::sliced_weights() const {
  return shards_ && shards_->stage() == 3 && shards_->holds_whole_model();
}

void WorkerState::save(const torch::nn::Module& module, const std::string& dir, const std::string& name) const {
  const bool root = Context::get().is_root();
  if (sliced_weights()) {
    shards_->save_weights(dir + "/" + name + ".safetensors");
  } else {
    if (shards_) shards_->gather_all();  // stage 3 with LoRA: the adapters are written whole
    if (root && lora_) {
      save_trainable_tensors(module, dir + "/" + name + "_lora.safetensors", lora_record_);
    } else if (root) {
      save_module(module, dir + "/" + name + ".pt");
    }
    if (shards_) shards_->release_all();
  }
  if (shards_) {
    shards_->save_optimizer(dir, name);
  } else if (root && optimizer_) {
    optimizer_->save(dir + "/" + name + "_optim.pt");
  }
}

void WorkerState::load(torch::nn::Module& module, const std::string& dir, const std::string& name,
                       bool with_optimizer) {
  const std::string weights = weights_file(dir, name);
  if (sliced_weights() && ends_with(weights, ".safetensors")) {  // never with LoRA: its base is whole
    shards_->load_weights(weights);                              // each rank reads its slices
    if (with_optimizer && trainable_) shards_->load_optimizer(dir, name);
    return;
  }
  if (shards_) shards_->gather_all();
  if (lora_) {
    const std::string adapters = dir + "/" + name + "_lora.safetensors";
    usage_check(std::filesystem::exists(adapters),
                adapters + " not found: " + dir + " was saved without " + name + ".lora (" + name +
                    ".pt holds whole weights); resume it without LoRA, or start a LoRA run from it with " + name +
                    ".init_checkpoint=" + dir);
    load_trainable_tensors(module, adapters, &lora_record_);
  } else {
    load_module(module, weights);
  }
  if (shards_) {
    shards_->reslice();
    if (with_optimizer && trainable_) shards_->load_optimizer(dir, name);
  } else if (with_optimizer && optimizer_) {
    optimizer_->load(dir + "/" + name + "_optim.pt", names_);
  }
}

void WorkerState::seed_dropout(int64_t seed) {
  if (!dropout_ || !trainable_) return;
  at::Generator generator = at::globalContext().defaultGenerator(device_);
  const uint64_t steps = static_cast<uint64_t>(optimizer().steps_taken());
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_current_seed(
      hash_combine(hash_combine(static_cast<uint64_t>(seed), steps), static_cast<uint64_t>(Context::get().rank())));
}

std::string initial_weights_file(const std::string& dir, const std::string& role, bool is_value_model) {
  const std::string own = weights_file(dir, role), policy = weights_file(dir, "actor");
  return is_value_model && !std::filesystem::exists(own) && std::filesystem::exists(policy) ? policy : own;
}

bool is_policy_weights(const std::string& file) {
  return !file.empty() && std::filesystem::path(file).stem() == "actor";
}

void load_policy_backbone(TransformerImpl& backbone, const std::string& file, const ModelConfig& config,
                          int64_t vocab_size) {
  CausalLM policy(config, vocab_size);
  load_module(*policy, file);
  torch::NoGradGuard no_grad;
  auto source = policy->model->named_parameters();
  for (auto& item : backbone.named_parameters()) item.value().copy_(source[item.key()]);
}

bool trains_with_lora(const std::string& name) {
  return is_lora_parameter(name) || name.rfind("value_head.", 0) == 0;
}

namespace {

// The adapters' settings as recorded: rank, alpha, use_rslora and the resolved target modules (and expert weights,
// where there are any).
nlohmann::json lora_settings(const LoraConfig& lora, const std::string& role) {
  nlohmann::json settings = {{"rank", lora.rank},
                             {"alpha", lora.alpha},
                             {"use_rslora", lora.use_rslora},
                             {"target_modules", lora_targets(lora, role + ".lora")}};
  if (const auto experts = lora_expert_targets(lora, role + ".lora"); !experts.empty())
    settings["target_parameters"] = experts;
  return settings;
}

// "name: fingerprint, ..." of a base identity.
std::string describe_base(const std::map<std::string, std::string>& id) {
  std::vector<std::string> parts;
  for (const auto& [name, fingerprint] : id) parts.push_back(name + ": " + fingerprint);
  return join(parts, "; ");
}

// The recorded settings against this run's: each key that differs, as "<role>.lora.alpha is 16 there, 8 here".
std::vector<std::string> changed_settings(const nlohmann::json& recorded, const nlohmann::json& here,
                                          const std::string& role) {
  std::vector<std::string> changed;
  for (const auto& [key, value] : here.items())
    if (!recorded.contains(key) || recorded[key] != value)
      changed.push_back(role + ".lora." + key + " is " + (recorded.contains(key) ? recorded[key].dump() : "missing") +
                        " there, " + value.dump() + " here");
  return changed;
}

// The header's record against `expected`: settings first (they would change the maths), then the base.
void check_lora_record(const nlohmann::json& metadata, const std::string& path, const LoraRecord& expected) {
  if (!metadata.is_object() || !metadata.contains("lora")) return;  // written before records: nothing to compare
  nlohmann::json settings, base;
  try {
    settings = parse_json_bounded(metadata.at("lora").get<std::string>());
    base = parse_json_bounded(metadata.at("base").get<std::string>());
    base.at("source").get<std::string>();
    base.at("files").get<std::map<std::string, std::string>>();
  } catch (const std::exception& e) {
    throw UsageError(path + ": its header's LoRA record (__metadata__ lora and base) is damaged: " + e.what());
  }
  const std::vector<std::string> changed =
      changed_settings(settings, lora_settings(expected.lora, expected.role), expected.role);
  usage_check(changed.empty(), path + ": the adapters were trained with other settings (" + join(changed, "; ") +
                                   "): set them as the run that wrote it did");
  const auto recorded = base["files"].get<std::map<std::string, std::string>>();
  usage_check(recorded == expected.base_id, path + ": the adapters were trained on the base " +
                                                base["source"].get<std::string>() + " (" + describe_base(recorded) +
                                                "), and this run's base is " + expected.base_source + " (" +
                                                describe_base(expected.base_id) + "): set model.path (or " +
                                                expected.role + ".init_checkpoint) to the base they were trained on");
}

}  // namespace

std::string recorded_base_checkpoint(const std::string& adapters) {
  nlohmann::json metadata;
  load_safetensors(adapters, &metadata);
  try {
    if (!metadata.is_object() || !metadata.contains("base")) return "";
    const nlohmann::json base = parse_json_bounded(metadata.at("base").get<std::string>());
    const std::string file = base.value("checkpoint", "");
    const auto files = base.at("files").get<std::map<std::string, std::string>>();
    const auto it = files.find(std::filesystem::path(file).filename().string());
    return !file.empty() && it != files.end() && file_fingerprint(file) == it->second ? file : "";
  } catch (const std::exception&) {
    return "";  // a damaged record is named when the adapters are read (check_lora_record)
  }
}

LoraRecord lora_record(const ModelConfig& config, const LoraConfig& lora, const std::string& role,
                       const std::string& checkpoint_file) {
  LoraRecord record;
  record.role = role;
  record.lora = lora;
  if (!checkpoint_file.empty()) {
    record.base_source = checkpoint_file;
    record.base_checkpoint = checkpoint_file;
    record.base_id[std::filesystem::path(checkpoint_file).filename().string()] = file_fingerprint(checkpoint_file);
  } else if (!config.path.empty()) {
    record.base_source = "model.path " + config.path;
    for (const std::string& file : safetensors_dir_files(config.path))
      record.base_id[file] = file_fingerprint(config.path + "/" + file);
  } else {
    std::ostringstream init_std;
    init_std << config.init_std;
    record.base_source = "the seeded initialisation";
    record.base_id = {{"model.seed", std::to_string(config.seed)}, {"model.init_std", init_std.str()}};
  }
  return record;
}

void save_trainable_tensors(const torch::nn::Module& module, const std::string& path, const LoraRecord& record) {
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : module.named_parameters())
    if (trains_with_lora(item.key())) tensors[item.key()] = item.value().detach();
  const nlohmann::json base = {
      {"source", record.base_source}, {"checkpoint", record.base_checkpoint}, {"files", record.base_id}};
  save_safetensors(path, tensors,
                   {{"format", "ppo.cpp LoRA adapters"},
                    {"lora", lora_settings(record.lora, record.role).dump()},
                    {"base", base.dump()}});
}

void load_trainable_tensors(torch::nn::Module& module, const std::string& path, const LoraRecord* expected) {
  check_regular_file(path);
  verify_manifest_entry(path);
  nlohmann::json metadata;
  const std::map<std::string, torch::Tensor> tensors = load_safetensors(path, &metadata);
  if (expected) check_lora_record(metadata, path, *expected);
  torch::NoGradGuard no_grad;
  size_t used = 0;
  for (auto& item : module.named_parameters()) {
    if (!trains_with_lora(item.key())) continue;
    const auto it = tensors.find(item.key());
    usage_check(it != tensors.end(), path + ": no tensor " + item.key() +
                                         " (the adapters of another actor.lora / critic.lora: rank, target_modules)");
    usage_check(it->second.sizes() == item.value().sizes(),
                path + ": " + item.key() + " has shape " + c10::str(it->second.sizes()) + ", this model's " +
                    c10::str(item.value().sizes()) + " (another lora rank or model shape)");
    item.value().copy_(it->second.to(item.value().scalar_type()));
    ++used;
  }
  if (used == tensors.size()) return;
  for (const auto& [name, tensor] : tensors)  // a tensor left over would be an adapter silently dropped
    usage_check(module.named_parameters().contains(name) && trains_with_lora(name),
                path + ": tensor " + name + " is not trained by this model (the adapters of other " +
                    "target_modules): set actor.lora / critic.lora as the run that wrote it did");
}

void WorkerState::check_identical(Context& context, const std::string& what) {
  if (sliced_weights()) {  // a unit at a time, never the whole model
    shards_->each_unit_whole(
        [&](const ShardUnit& u) { check_identical_across_ranks(u.params, context, what + " (" + u.name + ")"); });
    return;
  }
  if (shards_) shards_->gather_all();
  check_identical_across_ranks(module_.parameters(), context, what);
  if (shards_) shards_->release_all();
}

}  // namespace ppo
