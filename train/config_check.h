// The start-up check of the whole config, before any model is built: every relation between keys (batch sizes for
// the world size, with the nearest valid values; lengths against positions; token budgets; the curriculum), and every
// variant name against its registry (train/registry_keys.h: the registries live with their code). A single key's
// range is its schema row's (common/config.h), checked once by load_config. It reads the config and never changes
// it: what it derives (per-rank sizes, the run's steps, the micro-batch sizes used) comes back as a RunShape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"

namespace ppo {

// What check_config derives from a config and a world size (never set by the user): the run's shape, returned once
// and passed to what reads it.
struct RunShape {
  int64_t world_size = 1;
  int64_t total_training_steps = 0;     // trainer.total_training_steps, or the curriculum's; 0: by total_epochs
  int64_t dispatch_block = 0;           // prompts per dispatch block: gcd of the actor and critic mini-batches
  int64_t padded_train_batch_size = 0;  // train_batch_size with every block padded to the world (pad_to_world)
  int64_t prompts_per_rank = 0;         // padded_train_batch_size / world
  int64_t responses_per_rank = 0;       // prompts_per_rank * n
  int64_t actor_mini_batches = 0;       // mini-batches per epoch
  int64_t actor_mini_prompts_per_rank = 0;
  int64_t actor_micro_batches = 0;     // micro-batches per mini-batch per rank (fixed-size mode)
  int64_t actor_micro_batch_size = 0;  // responses per micro-batch: ppo_micro_batch_size_per_gpu, at most a rank's
  int64_t critic_mini_batches = 0;
  int64_t critic_mini_prompts_per_rank = 0;
  int64_t critic_micro_batches = 0;
  int64_t critic_micro_batch_size = 0;
  int64_t val_prompts_per_rank = 0;  // over the ranks that generate: all, or parallel.rollout_ranks
  int64_t rollout_ranks = 0;         // parallel.rollout_ranks; world_size is then the trainer ranks
  std::vector<std::string> notes;    // settings check_config replaced without changing any number, one line each
};

// What a subcommand runs, and so what the check covers:
//   train       PPO (or another algorithm.adv_estimator): everything;
//   sft         supervised training on one reference answer per prompt: no critic, no groups (rollout.n counts as 1);
//   reward_model  ppo rm: Bradley-Terry training of a reward model on preference pairs, the critic's keys (its two
//               sequences per pair as rollout.n = 2), no actor and no generation;
//   generation  eval and generate: names, ranges, lengths, sampling and the validation batch, no training batch.
enum class RunMode { train, sft, reward_model, generation };

// Checks every relation and name `mode` needs for `world_size` ranks and returns what it derives. Throws UsageError
// naming the keys, their values, the world size and the nearest valid values (or the valid names).
RunShape check_config(const Config& config, int64_t world_size, RunMode mode = RunMode::train);

// The part of check_config that splits the job: parallel.rollout_ranks and async.max_staleness against its `world`
// ranks (`mode` train; the other subcommands run every rank alike and ignore both).
void check_roles(const Config& config, int64_t world, RunMode mode);

// The batch arithmetic printed at start-up by rank 0.
std::string describe_batch(const Config& config, const RunShape& shape);

}  // namespace ppo
