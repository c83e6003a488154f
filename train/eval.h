// ppo eval: the accuracy of a checkpoint on the validation prompts, by difficulty.
#pragma once

#include <string>

#include "common/config.h"

namespace ppo {

// Prints accuracy per difficulty of `checkpoint` (or actor.init_checkpoint, or model.path) on the validation
// prompts. Returns the exit status.
int run_eval(Config& config, const std::string& checkpoint);

}  // namespace ppo
