#include "workers/updates.h"

#include <optional>

#include "common/random.h"

namespace ppo {

std::vector<MicroBatch> rank_micro_batches(const Batch& batch, MicroBatchSpec spec, bool same_count, Context& context) {
  if (!same_count || spec.max_tokens <= 0 || context.world_size() == 1) return make_micro_batches(batch, spec);
  torch::Tensor count = torch::tensor({static_cast<int64_t>(make_micro_batches(batch, spec).size())}, torch::kInt64);
  context.all_reduce(count, ReduceOp::max);
  spec.min_count = count.item<int64_t>();
  return make_micro_batches(batch, spec);
}

void run_updates(const Batch& batch, const UpdateSchedule& s, Updater& updater, Context& context, Metrics& metrics,
                 const MicroLoss& micro_loss) {
  int64_t skipped = 0;
  for (int64_t epoch = 0; epoch < s.epochs; ++epoch) {
    Batch data = batch;
    if (s.shuffle_seed >= 0) {
      auto order = seeded_permutation(batch.size(), hash_combine(static_cast<uint64_t>(s.shuffle_seed), epoch));
      data = batch.select(torch::tensor(order, torch::kInt64));
    }
    for (const Batch& mini : data.chunk(s.mini_batches)) {
      torch::Tensor local = torch::stack({mini.at(field::response_mask).sum().to(torch::kFloat64),
                                          mini.at(field::sample_mask).sum().to(torch::kFloat64)})
                                .cpu();
      context.all_reduce(local, ReduceOp::sum);
      Denominators d{local[0].item<double>(), local[1].item<double>()};
      d.first_micro = true;
      DeviceMeans means;
      for (const MicroBatch& micro : rank_micro_batches(mini, s.micro, s.same_micro_count, context)) {
        std::optional<PackedSequences> packed;
        if (s.micro.packed) packed = pack_sequences(micro.batch).to(s.device);  // packed on the host, then moved
        torch::Tensor loss = micro_loss(micro.batch.to(s.device), packed ? &*packed : nullptr, d, means);
        loss.backward();
        updater.after_backward(context);
        d.first_micro = false;
      }
      means.flush(metrics);
      StepResult r = updater.step(context);
      skipped += r.skipped;
      if (!r.skipped) metrics.add_global(s.metric_prefix + "/grad_norm", r.grad_norm);
      metrics.add_global(s.metric_prefix + "/lr", r.lr);
    }
  }
  metrics.set(s.metric_prefix + "/skipped_steps", static_cast<double>(skipped));
}

}  // namespace ppo
