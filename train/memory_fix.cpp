// The searches of `ppo plan` over the memory planner (train/memory_plan.h): the largest micro-batch that fits, and
// the smallest change that makes a run fit.
#include <string>
#include <utility>
#include <vector>

#include "common/config_schema.h"
#include "common/error.h"
#include "rl/algorithms.h"
#include "train/config_check.h"
#include "train/memory_plan.h"

namespace ppo {

namespace {

// `config` with `overrides` applied.
Config with_overrides(const Config& config, const std::vector<std::string>& overrides) {
  Config out = config;
  for (const std::string& o : overrides) apply_override(out, o);
  return out;
}

// The key of `role`'s micro-batch size: responses, or tokens with use_dynamic_bsz.
std::string micro_batch_key(const Config& config, const std::string& role) {
  const bool dynamic = role == "actor" ? config.actor.use_dynamic_bsz : config.critic.use_dynamic_bsz;
  return role + (dynamic ? ".ppo_max_token_len_per_gpu" : ".ppo_micro_batch_size_per_gpu");
}

// Whether `role`'s update phase fits with its micro-batch set to `size`.
bool update_fits(const Config& config, const PlanOptions& options, const std::string& role, int64_t size) {
  const MemoryPlan plan =
      plan_memory(with_overrides(config, {micro_batch_key(config, role) + "=" + std::to_string(size)}), options);
  for (const PhaseMemory& phase : plan.phases)
    if (phase.phase == "update_" + role) return phase.peak_bytes <= options.device_bytes;
  return true;
}

// The micro-batch overrides (actor, then critic) that make `config` fit, each the largest that fits; empty when one
// of them cannot fit a single response (or sequence).
std::vector<std::string> micro_batch_fix(const Config& config, const PlanOptions& options) {
  std::vector<std::string> overrides;
  Config c = config;
  for (const std::string role : {"actor", "critic"}) {
    if (role == "critic" && !adv_estimator(config.algorithm.adv_estimator).needs_critic) continue;
    const int64_t largest = largest_micro_batch(c, options, role);
    if (largest == 0) return {};
    overrides.push_back(micro_batch_key(c, role) + "=" + std::to_string(largest));
    c = with_overrides(c, {overrides.back()});
  }
  return overrides;
}

}  // namespace

int64_t largest_micro_batch(const Config& config, const PlanOptions& options, const std::string& role) {
  usage_check(role == "actor" || role == "critic", "largest_micro_batch: role must be actor or critic, got " + role);
  usage_check(options.device_bytes > 0, "largest_micro_batch needs the device's memory");
  const RunShape d = check_config(config, options.world_size);
  const bool dynamic = role == "actor" ? config.actor.use_dynamic_bsz : config.critic.use_dynamic_bsz;
  // The sizes check_config accepts, smallest first: the divisors of the rank's mini-batch in responses, or token
  // budgets from one sequence to all of the rank's tokens.
  std::vector<int64_t> sizes;
  if (dynamic) {
    const int64_t prompt = options.prompt_width > 0 ? options.prompt_width : config.data.max_prompt_length;
    const int64_t T = prompt + config.data.max_response_length;
    const int64_t rows = std::max<int64_t>(1, d.responses_per_rank);
    for (int64_t rows_per_micro = 1; rows_per_micro <= rows; ++rows_per_micro) sizes.push_back(rows_per_micro * T);
  } else {
    const int64_t mini =
        (role == "actor" ? d.actor_mini_prompts_per_rank : d.critic_mini_prompts_per_rank) * config.rollout.n;
    for (int64_t size = 1; size <= std::max<int64_t>(1, mini); ++size)
      if (mini % size == 0) sizes.push_back(size);
  }
  // Binary search: the peak grows with the micro-batch.
  int64_t lo = 0, hi = static_cast<int64_t>(sizes.size()) - 1;
  if (!update_fits(config, options, role, sizes[0])) return 0;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (update_fits(config, options, role, sizes[mid]))
      lo = mid;
    else
      hi = mid - 1;
  }
  return sizes[lo];
}

MemoryFix suggest_memory_fix(const Config& config, const PlanOptions& options) {
  const int64_t W = options.world_size;
  Config base = config;
  if (options.zero_stage >= 0) apply_override(base, "parallel.zero_stage=" + std::to_string(options.zero_stage));
  PlanOptions o = options;
  o.zero_stage = -1;
  const auto plan_with = [&](const std::vector<std::string>& overrides) {
    return plan_memory(with_overrides(base, overrides), o);
  };
  const MemoryPlan current = plan_with({});
  if (current.fits) return {{}, current};
  const bool has_critic = adv_estimator(config.algorithm.adv_estimator).needs_critic;
  const bool has_ref = config.actor.use_kl_loss || config.algorithm.use_kl_in_reward;
  std::vector<std::string> candidates;
  if (current.zero_stage < 3 && W > 1) candidates.push_back("parallel.zero_stage=3");  // one rank has nothing to shard
  const std::pair<const char*, bool> flags[] = {
      {"actor.offload.optimizer", config.actor.offload.optimizer},
      {"critic.offload.optimizer", !has_critic || config.critic.offload.optimizer},
      {"actor.offload.param", config.actor.offload.param},
      {"critic.offload.param", !has_critic || config.critic.offload.param},
      {"ref.offload.param", !has_ref || config.ref.offload.param},
      {"reward_model.offload.param", !config.reward_model.enable || config.reward_model.offload.param},
      {"actor.offload.grad", config.actor.offload.grad},
      {"critic.offload.grad", !has_critic || config.critic.offload.grad}};
  for (const auto& [key, set_or_absent] : flags)
    if (!set_or_absent) candidates.push_back(std::string(key) + "=true");
  if (!config.model.enable_gradient_checkpointing) candidates.push_back("model.enable_gradient_checkpointing=true");
  // One change, in the order of preference.
  for (const std::string& candidate : candidates) {
    MemoryPlan plan = plan_with({candidate});
    if (plan.fits) return {{candidate}, plan};
  }
  std::vector<std::string> micro = micro_batch_fix(base, o);
  if (!micro.empty()) {
    MemoryPlan plan = plan_with(micro);
    if (plan.fits) return {micro, plan};
  }
  // Several: the changes above one after another, then smaller micro-batches on top.
  std::vector<std::string> applied;
  for (const std::string& candidate : candidates) {
    applied.push_back(candidate);
    MemoryPlan plan = plan_with(applied);
    if (plan.fits) return {applied, plan};
  }
  micro = micro_batch_fix(with_overrides(base, applied), o);
  if (micro.empty()) return {{}, plan_with(applied)};
  applied.insert(applied.end(), micro.begin(), micro.end());
  MemoryPlan plan = plan_with(applied);
  if (!plan.fits) return {{}, plan};
  return {applied, plan};
}

}  // namespace ppo
