#include "records/trainer_state.h"

#include <cmath>
#include <set>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"

namespace ppo {

namespace {

constexpr uint64_t kMaxCounter = uint64_t{1} << 53;  // 2^53: larger whole numbers are not exact in JSON readers

const nlohmann::json& field(const nlohmann::json& state, const std::string& key, const std::string& file) {
  usage_check(state.contains(key), file + ": key '" + key + "' is missing");
  return state.at(key);
}

int64_t counter(const nlohmann::json& state, const std::string& key, const std::string& file) {
  const nlohmann::json& v = field(state, key, file);
  usage_check(v.is_number_integer(), file + ": key '" + key + "' must be a whole number, not " + v.dump());
  usage_check(v.is_number_unsigned() && v.get<uint64_t>() < kMaxCounter,
              file + ": key '" + key + "' is " + v.dump() + ", outside [0, 2^53)");
  return v.get<int64_t>();
}

// Keys that may differ on resume (changed_run_keys): how the run is carried out, not what it computes.
bool free_on_resume(const std::string& key) {
  static const std::set<std::string> keys = {"trainer.total_epochs",
                                             "trainer.total_training_steps",
                                             "trainer.output_dir",
                                             "trainer.save_freq",
                                             "trainer.test_freq",
                                             "trainer.val_before_train",
                                             "trainer.resume_mode",
                                             "trainer.max_ckpt_to_keep",
                                             "trainer.num_threads",
                                             "trainer.log_freq",
                                             "trainer.write_checkpoints",
                                             "trainer.max_skipped_steps",
                                             "trainer.logger",
                                             "trainer.resume_allow_config_change",
                                             "trainer.accept_checkpoints_without_manifest",
                                             "parallel.backend",
                                             "parallel.timeout_s",
                                             "parallel.check_params_freq",
                                             "parallel.zero_stage",
                                             "parallel.check_collectives",
                                             "data.val_files",
                                             "data.val_size",
                                             "data.val_batch_size",
                                             "rollout.val_temperature",
                                             "reward.timeout_s",
                                             "reward.batch_timeout_s",
                                             "rollout.multi_turn.environment.timeout_s",
                                             "model.path",
                                             "model.tokenizer",
                                             "model.enable_gradient_checkpointing",
                                             "model.attn_implementation",
                                             "actor.init_checkpoint",
                                             "critic.init_checkpoint",
                                             "actor.ppo_micro_batch_size_per_gpu",
                                             "actor.use_dynamic_bsz",
                                             "actor.ppo_max_token_len_per_gpu",
                                             "critic.ppo_micro_batch_size_per_gpu",
                                             "critic.use_dynamic_bsz",
                                             "critic.ppo_max_token_len_per_gpu",
                                             "rollout.micro_batch_size",
                                             "rollout.max_num_seqs",
                                             "rollout.max_kv_tokens",
                                             "rollout.check_interval",
                                             "rollout.cuda_graphs",
                                             "rollout.log_prob_micro_batch_size_per_gpu",
                                             "rollout.log_prob_use_dynamic_bsz",
                                             "rollout.log_prob_max_token_len_per_gpu",
                                             "ref.log_prob_micro_batch_size_per_gpu"};
  return keys.count(key) > 0 || key.find(".offload.") != std::string::npos;
}

}  // namespace

std::map<std::string, std::string> config_record(Config& config) {
  std::map<std::string, std::string> record;
  for (const ConfigField& field : config_fields(config)) record[field.key] = field.get_text();
  return record;
}

std::vector<std::string> changed_run_keys(const std::map<std::string, std::string>& recorded, Config& config) {
  std::vector<std::string> changed;
  for (const auto& [key, here] : config_record(config)) {
    const auto it = recorded.find(key);
    if (free_on_resume(key) || it == recorded.end() || it->second == here) continue;  // a key newer than the file
    changed.push_back(key + " is " + here + " here, " + it->second + " in the checkpoint");
  }
  return changed;
}

nlohmann::json trainer_state_json(const TrainerState& s) {
  nlohmann::json state = {{"kind", s.kind},
                          {"global_step", s.global_step},
                          {"kl_coef", s.kl_coef},
                          {"actor_optimizer_steps", s.actor_optimizer_steps},
                          {"critic_optimizer_steps", s.critic_optimizer_steps},
                          {"data_seed", s.data_seed},
                          {"gen_batches", s.gen_batches},
                          {"sampler_epoch", s.sampler_epoch}};
  if (!s.config.empty()) state["config"] = s.config;
  return state;
}

TrainerState parse_trainer_state(const std::string& text, const std::string& file) {
  nlohmann::json state;
  try {
    state = parse_json_bounded(text);
  } catch (const nlohmann::json::exception&) {
    throw UsageError(file + ": not valid JSON");
  } catch (const UsageError& e) {
    throw UsageError(file + ": " + e.what());
  }
  usage_check(state.is_object(), file + ": not a JSON object");
  TrainerState s;
  if (state.contains("kind")) {
    const nlohmann::json& kind = state.at("kind");
    usage_check(kind == "ppo" || kind == "sft", file + ": key 'kind' must be \"ppo\" or \"sft\", not " + kind.dump());
    s.kind = kind.get<std::string>();
  }
  s.global_step = counter(state, "global_step", file);
  s.actor_optimizer_steps = counter(state, "actor_optimizer_steps", file);
  s.critic_optimizer_steps = counter(state, "critic_optimizer_steps", file);
  s.sampler_epoch = counter(state, "sampler_epoch", file);
  s.gen_batches = state.contains("gen_batches") ? counter(state, "gen_batches", file) : s.global_step;
  const nlohmann::json& seed = field(state, "data_seed", file);
  usage_check(seed.is_number_integer(), file + ": key 'data_seed' must be a whole number, not " + seed.dump());
  s.data_seed = seed.get<int64_t>();
  const nlohmann::json& kl = field(state, "kl_coef", file);
  usage_check(kl.is_number() && std::isfinite(kl.get<double>()) && kl.get<double>() >= 0.0,
              file + ": key 'kl_coef' must be a finite number >= 0, not " + kl.dump());
  s.kl_coef = kl.get<double>();
  if (state.contains("config")) {
    const nlohmann::json& config = state.at("config");
    usage_check(config.is_object(), file + ": key 'config' must be an object of key: value text");
    for (const auto& [key, value] : config.items()) {
      usage_check(value.is_string(), file + ": config key '" + key + "' must be a string, not " + value.dump());
      s.config[key] = value.get<std::string>();
    }
  }
  return s;
}

TrainerState read_trainer_state(const std::string& file) {
  verify_manifest_entry(file);
  return parse_trainer_state(read_regular_file(file), file);
}

}  // namespace ppo
