// ppo generate: sample responses to validation prompts and print them with their rewards.
#pragma once

#include <cstdint>

#include "common/config.h"

namespace ppo {

// `count` validation prompts, rollout.n responses each, printed with their rewards (with `jsonl`, one JSON object
// per response: {"prompt", "response", "reward", "correct"}). Returns the exit status.
int run_generate(const Config& config, int64_t count, bool jsonl = false);

}  // namespace ppo
