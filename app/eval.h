// ppo eval: the accuracy of a checkpoint on the validation prompts, by difficulty.
#pragma once

#include <string>

#include "common/config.h"

namespace ppo {

// Prints accuracy per difficulty of `checkpoint` (or actor.init_checkpoint, or model.path) on the validation
// prompts; with samples_per_prompt = k > 1, pass@1 and pass@k (see evaluate). Returns the exit status.
int run_eval(const Config& config, const std::string& checkpoint, int64_t samples_per_prompt = 1);

}  // namespace ppo
