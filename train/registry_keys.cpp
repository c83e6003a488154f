// See train/registry_keys.h.
#include "train/registry_keys.h"

#include <algorithm>

#include "common/error.h"
#include "common/strings.h"
#include "parallel/context.h"
#include "records/run_dir.h"
#include "rl/algorithms.h"
#include "rl/distillation.h"
#include "rl/kl_controller.h"
#include "tasks/datasets.h"
#include "tasks/reward.h"
#include "workers/optimizer.h"

namespace ppo {

namespace {

// Names without help.
std::vector<KeyChoice> bare(const std::vector<std::string>& names) {
  std::vector<KeyChoice> choices;
  for (const std::string& name : names) choices.push_back({name, ""});
  return choices;
}

void check_member(const std::string& key, const std::string& value, const std::vector<std::string>& valid) {
  usage_check(std::find(valid.begin(), valid.end(), value) != valid.end(),
              key + ": unknown value '" + value + "'; valid: " + join(valid, ", "));
}

// A row whose check is the value's membership: `value` reads it from a config.
RegistryKey member(const std::string& key, std::function<std::vector<std::string>()> names,
                   std::function<const std::string&(const Config&)> value) {
  return {key, [names] { return bare(names()); },
          [key, names, value](const Config& c) { check_member(key, value(c), names()); }};
}

std::vector<RegistryKey> make_registry_keys() {
  std::vector<RegistryKey> rows;
  rows.push_back(member(
      "data.task", [] { return task_names(); }, [](const Config& c) -> const std::string& { return c.data.task; }));
  rows.push_back(
      {"actor.policy_loss.loss_mode",
       [] {
         std::vector<KeyChoice> choices;
         for (const PolicyLossSpec& l : policy_losses())
           choices.push_back({l.name, std::string(l.help) + "; " + l.source});
         return choices;
       },
       [](const Config& c) { policy_loss_spec(c.actor.policy_loss.loss_mode, "actor.policy_loss.loss_mode"); }});
  for (const std::string section : {"actor", "critic"})
    rows.push_back({section + ".loss_agg_mode", [] { return bare(loss_agg_mode_names()); },
                    [section](const Config& c) {
                      parse_loss_agg_mode(section == "actor" ? c.actor.loss_agg_mode : c.critic.loss_agg_mode,
                                          section + ".loss_agg_mode");
                    }});
  rows.push_back({"actor.kl_loss_type", [] { return bare(kl_estimator_names()); },
                  [](const Config& c) { parse_kl_estimator(c.actor.kl_loss_type, "actor.kl_loss_type"); }});
  for (const std::string section : {"actor", "critic"})
    rows.push_back(member(
        section + ".optim.warmup_style", [] { return warmup_style_names(); },
        [section](const Config& c) -> const std::string& {
          return section == "actor" ? c.actor.optim.warmup_style : c.critic.optim.warmup_style;
        }));
  rows.push_back({"algorithm.kl_ctrl.type", [] { return bare(kl_controller_names()); },
                  [](const Config& c) {
                    const KlCtrlConfig& k = c.algorithm.kl_ctrl;
                    make_kl_controller(k.type, k.kl_coef, k.target_kl, k.horizon, "algorithm.kl_ctrl");
                  }});
  rows.push_back({"algorithm.rollout_correction.rollout_is", [] { return bare(rollout_is_level_names()); },
                  [](const Config& c) {
                    parse_rollout_is_level(c.algorithm.rollout_correction.rollout_is,
                                           "algorithm.rollout_correction.rollout_is");
                  }});
  rows.push_back(member(
      "algorithm.filter_groups.metric", [] { return filter_metric_names(); },
      [](const Config& c) -> const std::string& { return c.algorithm.filter_groups.metric; }));
  rows.push_back({"algorithm.adv_estimator",
                  [] {
                    std::vector<KeyChoice> choices;
                    for (const AdvEstimatorSpec& e : adv_estimators())
                      choices.push_back({e.name, std::string(e.help) + "; " + e.source});
                    return choices;
                  },
                  [](const Config& c) { adv_estimator(c.algorithm.adv_estimator); }});
  rows.push_back({"algorithm.kl_penalty", [] { return bare(kl_estimator_names()); },
                  [](const Config& c) { parse_kl_estimator(c.algorithm.kl_penalty, "algorithm.kl_penalty"); }});
  rows.push_back({"trainer.logger", [] { return bare(logger_names()); },
                  [](const Config& c) {
                    for (const std::string& logger : c.trainer.logger)
                      check_member("trainer.logger", logger, logger_names());
                  }});
  rows.push_back({"reward.function", [] { return bare(reward_function_names()); },
                  [](const Config& c) {  // empty: chosen by each record's data_source
                    if (!c.reward.function.empty())
                      check_member("reward.function", c.reward.function, reward_function_names());
                  }});
  rows.push_back(member(
      "parallel.backend", [] { return Context::backend_names(); },
      [](const Config& c) -> const std::string& { return c.parallel.backend; }));
  rows.push_back({"distillation.loss_mode",
                  [] {
                    std::vector<KeyChoice> choices;
                    for (const auto& [name, help] : distill_loss_modes()) choices.push_back({name, help});
                    return choices;
                  },
                  [](const Config& c) { distill_spec(c.distillation.loss_mode); }});
  return rows;
}

}  // namespace

const std::vector<RegistryKey>& registry_keys() {
  static const std::vector<RegistryKey> rows = make_registry_keys();
  return rows;
}

KeyChoices registry_choices() {
  KeyChoices choices;
  for (const RegistryKey& row : registry_keys()) choices[row.key] = row.names();
  return choices;
}

void check_registry_names(const Config& config) {
  for (const RegistryKey& row : registry_keys()) row.check(config);
}

}  // namespace ppo
