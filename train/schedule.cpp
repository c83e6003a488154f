// See train/schedule.h.
#include "train/schedule.h"

#include "common/error.h"
#include "common/random.h"

namespace ppo {

StepSchedule::StepSchedule(const Config& config, int64_t dataset_size)
    : dataset_size_(dataset_size),
      batch_size_(config.data.train_batch_size),
      steps_per_epoch_(dataset_size / std::max<int64_t>(1, config.data.train_batch_size)),
      test_freq_(config.trainer.test_freq),
      save_freq_(config.trainer.save_freq),
      write_checkpoints_(config.trainer.write_checkpoints),
      shuffle_(config.data.shuffle),
      seed_(static_cast<uint64_t>(config.data.seed)) {
  usage_check(steps_per_epoch_ >= 1,
              "data: " + std::to_string(dataset_size) +
                  " training prompts are fewer than data.train_batch_size=" + std::to_string(batch_size_));
  total_steps_ = config.trainer.total_training_steps > 0 ? config.trainer.total_training_steps
                                                         : config.trainer.total_epochs * steps_per_epoch_;
}

std::vector<int64_t> StepSchedule::prompt_indices(int64_t step) const {
  const int64_t index = step - 1, offset = (index % steps_per_epoch_) * batch_size_;
  std::vector<int64_t> order(dataset_size_);
  if (shuffle_) {
    order = seeded_permutation(dataset_size_, hash_combine(seed_, static_cast<uint64_t>(epoch(step))));
  } else {
    for (int64_t i = 0; i < dataset_size_; ++i) order[i] = i;
  }
  return std::vector<int64_t>(order.begin() + offset, order.begin() + offset + batch_size_);
}

bool StepSchedule::validates_at(int64_t step) const {
  return test_freq_ > 0 && (step % test_freq_ == 0 || is_last(step));
}

bool StepSchedule::saves_at(int64_t step) const {
  return write_checkpoints_ && (is_last(step) || (save_freq_ > 0 && step % save_freq_ == 0));
}

RankPrompts step_prompts(const StepSchedule& schedule, int64_t step, const std::vector<TaskSample>& dataset,
                         const Tokenizer& tokenizer, const Config& config, const Context& context) {
  std::vector<TaskSample> global;
  for (int64_t i : schedule.prompt_indices(step)) global.push_back(dataset[i]);
  return rank_prompts(global, tokenizer, config, config.derived.dispatch_block, context.world_size(), context.rank(),
                      config.parallel.pad_to_world);
}

}  // namespace ppo
