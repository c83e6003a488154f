// The update loop of a worker (actor or critic): epochs x mini-batches x micro-batches, gradients accumulated over a
// mini-batch's micro-batches and one optimizer step (workers/optimizer.h) per mini-batch.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "common/batch.h"
#include "model/packing.h"
#include "parallel/context.h"
#include "rl/metrics.h"
#include "workers/optimizer.h"

namespace ppo {

// The normalisers of one mini-batch over ALL ranks, so that the per-micro-batch losses, summed over micro-batches
// and ranks, are exactly the mini-batch loss (token-mean divides by tokens, seq-* modes by sequences).
struct Denominators {
  double tokens = 0;         // response tokens of real (non-padding) samples
  double sequences = 0;      // real samples
  bool first_micro = false;  // the first micro-batch of the mini-batch on this rank (to count a mini-batch once)
};

struct UpdateSchedule {
  int64_t epochs = 1;
  int64_t mini_batches = 1;            // equal parts of this rank's batch, one optimizer step each
  MicroBatchSpec micro;                // micro-batches of a mini-batch: a count or a token budget
  std::string metric_prefix;           // "actor" or "critic"
  int64_t shuffle_seed = -1;           // >= 0: permute the rank's samples per epoch with this seed
  torch::Device device = torch::kCPU;  // where the micro-batches are computed
  // Every rank runs as many micro-batches as the rank with the most (a sharded model's collectives run per
  // micro-batch): token-budget micro-batches are split further where a rank has fewer.
  bool same_micro_count = false;
};

// The micro-batches of `batch` under `spec`; with `same_count`, as many on every rank as the rank with the most
// (one all-reduce), for a sharded model whose forwards gather parameters.
std::vector<MicroBatch> rank_micro_batches(const Batch& batch, MicroBatchSpec spec, bool same_count, Context& context);

// Returns the loss of one micro-batch (on the schedule's device), normalised by `denominators` (so it can be summed),
// and records its metrics. `packed`: the micro-batch's real tokens packed (model/packing.h) when the schedule's
// micro-batch spec says packed, else null.
using MicroLoss = std::function<torch::Tensor(const Batch& micro, const PackedSequences* packed,
                                              const Denominators& denominators, DeviceMeans& metrics)>;

// epochs x mini-batches x micro-batches: backward per micro-batch (gradient accumulation), one reduced optimizer
// step per mini-batch; records <prefix>/grad_norm, <prefix>/lr, <prefix>/skipped_steps. The micro-batches' metrics
// are read from the device once per mini-batch.
void run_updates(const Batch& batch, const UpdateSchedule& schedule, Updater& updater, Context& context,
                 Metrics& metrics, const MicroLoss& micro_loss);

}  // namespace ppo
