// The start-up check of the whole config, before any model is built: every relation between keys (batch sizes for
// the world size, with the nearest valid values; lengths against positions; token budgets; the curriculum), and every
// variant name against its registry (the registries live with their code: rl/algorithms.h, rl/kl_controller.h,
// workers/optimizer.h, model/transformer.h, tasks/task.h, parallel/context.h, records/run_dir.h). A single key's
// range is its schema row's (common/config.h), checked once by load_config. It reads the config and never changes
// it: what it derives (per-rank sizes, the run's steps, the micro-batch sizes used) comes back as a Derived.
#pragma once

#include <string>

#include "common/config.h"

namespace ppo {

// What a subcommand runs, and so what the check covers:
//   train       PPO (or another algorithm.adv_estimator): everything;
//   sft         supervised training on one reference answer per prompt: no critic, no groups (rollout.n counts as 1);
//   reward_model  ppo rm: Bradley-Terry training of a reward model on preference pairs, the critic's keys (its two
//               sequences per pair as rollout.n = 2), no actor and no generation;
//   generation  eval and generate: names, ranges, lengths, sampling and the validation batch, no training batch.
enum class RunMode { train, sft, reward_model, generation };

// Checks every relation and name `mode` needs for `world_size` ranks and returns what it derives. Throws UsageError
// naming the keys, their values, the world size and the nearest valid values (or the valid names).
Derived check_config(const Config& config, int64_t world_size, RunMode mode = RunMode::train);

// The part of check_config that splits the job: parallel.rollout_ranks and async.max_staleness against its `world`
// ranks (`mode` train; the other subcommands run every rank alike and ignore both).
void check_roles(const Config& config, int64_t world, RunMode mode);

// The batch arithmetic printed at start-up by rank 0 (config.derived filled by check_config).
std::string describe_batch(const Config& config);

}  // namespace ppo
