#include "records/trainer_state.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/manifest.h"

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

}  // namespace

RunningMoments parse_reward_moments(const nlohmann::json& moments, const std::string& file) {
  usage_check(moments.is_object(), file + ": key 'reward_moments' must be an object of count, mean and var");
  auto finite = [&](const char* key, bool non_negative) {
    const nlohmann::json& v = field(moments, key, file);
    usage_check(v.is_number() && std::isfinite(v.get<double>()) && (!non_negative || v.get<double>() >= 0.0),
                file + ": key 'reward_moments." + key + "' must be a finite number" + (non_negative ? " >= 0" : "") +
                    ", not " + v.dump());
    return v.get<double>();
  };
  RunningMoments m;
  m.count = counter(moments, "count", file + ": reward_moments");
  m.mean = finite("mean", false);
  m.var = finite("var", true);
  return m;
}

nlohmann::json reward_moments_json(const RunningMoments& m) {
  return {{"count", m.count}, {"mean", m.mean}, {"var", m.var}};
}

std::map<std::string, std::string> config_record(const Config& config) {
  std::map<std::string, std::string> record;
  for (const ConfigField& field : config_fields(config)) record[field.key] = field.get_text();
  return record;
}

std::vector<std::string> changed_run_keys(const std::map<std::string, std::string>& recorded, const Config& config) {
  std::vector<std::string> changed;
  for (const ConfigField& field : config_fields(config)) {
    const auto it = recorded.find(field.key);
    const std::string here = field.get_text();
    if (field.on_resume == OnResume::free || it == recorded.end() || it->second == here) continue;  // a newer key
    changed.push_back(field.key + " is " + here + " here, " + it->second + " in the checkpoint");
  }
  std::sort(changed.begin(), changed.end());  // by key
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
  if (s.reward_moments.count > 0) state["reward_moments"] = reward_moments_json(s.reward_moments);
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
    usage_check(kind == "ppo" || kind == "sft" || kind == "rm",
                file + ": key 'kind' must be \"ppo\", \"sft\" or \"rm\", not " + kind.dump());
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
  if (state.contains("reward_moments")) s.reward_moments = parse_reward_moments(state.at("reward_moments"), file);
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
