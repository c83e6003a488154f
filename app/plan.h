// ppo plan: the memory each rank's device needs in each phase of a PPO step, predicted from the config
// (train/memory_plan.h), whether that fits a device, and the smallest change that makes it fit.
#pragma once

#include <cstdint>
#include <string>

#include "common/config.h"

namespace ppo {

struct PlanCommandOptions {
  int64_t world_size = 1;
  std::string device_memory;  // e.g. 80GB, 80GiB, 85899345920; empty = no verdict
  int64_t prompt_length = 0;  // the widest prompt in tokens; 0 = data.max_prompt_length
};

// "80GB" (decimal units kB/KB, MB, GB, TB), "80GiB" (binary KiB, MiB, GiB, TiB), "512MiB", or a number of bytes ->
// bytes. UsageError naming `flag` for anything else.
double parse_bytes(const std::string& text, const std::string& flag);

// Prints the plan of `config` (model.path already resolved) and returns the exit status: 0, also when the run does
// not fit (the verdict and the suggested change are printed).
int run_plan(const Config& config, const PlanCommandOptions& options);

}  // namespace ppo
