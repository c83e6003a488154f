// Every rank of one job runs the same config on the same files. An MPMD launch (mpirun -np 1 ppo train ... : -np 1
// ppo train ... key=other), or hosts that hold different copies of a data file, would otherwise run to the end with
// ranks that compute different things, and N ranks would no longer equal 1 rank.
#pragma once

#include "common/config.h"
#include "parallel/context.h"

namespace ppo {

// Each rank describes what it was given: every resolved config key but trainer.num_threads (documented per rank:
// 0 means this host's cores), and the size and checksum of each file the run reads (data files, the tokenizer's
// files, the model's config.json, a chat template). The descriptions are gathered; a difference is a UsageError on
// every rank naming the keys or files, their values and the ranks. A world of one: nothing to do.
void check_ranks_agree(const Config& config, Context& context);

}  // namespace ppo
