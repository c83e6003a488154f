// trainer.balance_batch (veRL's _balance_batch): whole prompt groups move between ranks so that every rank holds a
// similar number of tokens.
#pragma once

#include <cstdint>

#include "common/batch.h"
#include "parallel/context.h"

namespace ppo {

struct BalancedBatch {
  Batch batch;                  // this rank's rows after balancing
  double imbalance_before = 1;  // max rank tokens / mean, as dispatched (perf/rank_token_imbalance_before)
  double imbalance_after = 1;   // the same after balancing (perf/rank_token_imbalance_after)
};

// Reassigns whole prompt groups (the n responses of a prompt) between ranks by their token counts (attention_mask
// sum). The local batch is laid out in dispatch blocks of `block_rows` rows per rank; each block's groups stay in
// that block (so every mini-batch keeps its prompts) and every rank keeps block_rows rows of it. Greedy: the block's
// groups, largest first, each to the rank with the fewest tokens so far among those with room; kept only when it
// beats the dispatcher's layout. Gathers the batch from all ranks (Context::all_gather, one per field); the result
// is the same on any rank order.
BalancedBatch balance_batch(const Batch& local, int64_t block_rows, int64_t n, Context& context);

}  // namespace ppo
