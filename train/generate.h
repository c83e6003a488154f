// ppo generate: sample responses to validation prompts and print them with their rewards.
#pragma once

#include <cstdint>

#include "common/config.h"

namespace ppo {

// `count` validation prompts, rollout.n responses each, printed with their rewards. Returns the exit status.
int run_generate(Config& config, int64_t count);

}  // namespace ppo
