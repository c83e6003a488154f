// Start-up validation of the whole config, before any model is built: every batch-size relation for the world size
// (with the nearest valid values), and every variant name against its registry (the registries live with their
// code: rl/algorithms.h, rl/kl_controller.h, rl/optimizer.h, model/transformer.h, tasks/task.h, parallel/context.h,
// train/run_dir.h).
#pragma once

#include <string>

#include "common/config.h"

namespace ppo {

// Checks every relation and name for `world_size` ranks and fills config.derived. Throws UsageError naming the keys,
// their values, the world size and the nearest valid values (or the valid names).
void validate(Config& config, int64_t world_size);

// The batch arithmetic printed at start-up by rank 0.
std::string describe_batch(const Config& config);

}  // namespace ppo
