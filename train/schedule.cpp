// See train/schedule.h.
#include "train/schedule.h"

#include "common/error.h"
#include "common/random.h"

namespace ppo {

StepSchedule::StepSchedule(const Config& config, const RunShape& shape, int64_t dataset_size)
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
  total_steps_ =
      shape.total_training_steps > 0 ? shape.total_training_steps : config.trainer.total_epochs * steps_per_epoch_;
  dispatch_block_ = shape.dispatch_block;
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

namespace {

// This rank's share of the global batch of `dataset[indices[i]]` for the `positions` (indices: none = identity).
RankPrompts rank_share(const std::vector<int64_t>& positions, const std::vector<int64_t>* indices,
                       const std::vector<TaskSample>& dataset, const Tokenizer& tokenizer, const Config& config,
                       int64_t dispatch_block, const Context& context) {
  std::vector<TaskSample> global;
  for (int64_t i : positions) global.push_back(dataset[indices ? (*indices)[i] : i]);
  const Dealing deal = generation_dealing(config, dispatch_block, context, static_cast<int64_t>(global.size()));
  return rank_prompts(global, tokenizer, config, deal.block, context.world_size(), context.rank(), deal.pad_to_world);
}

}  // namespace

Dealing generation_dealing(const Config& config, int64_t dispatch_block, const Context& context, int64_t rows) {
  if (context.role() == Role::rollout) return {rows, true};
  return {dispatch_block, config.parallel.pad_to_world};
}

RankPrompts step_prompts(const StepSchedule& schedule, int64_t step, const std::vector<TaskSample>& dataset,
                         const Tokenizer& tokenizer, const Config& config, const Context& context) {
  return rank_share(schedule.prompt_indices(step), nullptr, dataset, tokenizer, config, schedule.dispatch_block(),
                    context);
}

std::vector<CurriculumStage> curriculum_stages(const Config& config, const RunShape& shape,
                                               const std::vector<TaskSample>& train_set,
                                               const std::vector<int64_t>& file_sizes) {
  const CurriculumConfig& c = config.data.curriculum;
  std::vector<std::pair<std::string, std::vector<int64_t>>> parts;
  const int64_t size = static_cast<int64_t>(train_set.size());
  if (!c.train_files.empty()) {
    int64_t start = 0;
    for (size_t k = 0; k < file_sizes.size(); ++k) {
      std::vector<int64_t> indices(file_sizes[k]);
      for (int64_t i = 0; i < file_sizes[k]; ++i) indices[i] = start + i;
      start += file_sizes[k];
      parts.push_back({c.train_files[k], indices});
    }
  } else if (!c.difficulties.empty()) {
    for (int64_t difficulty : c.difficulties) {
      std::vector<int64_t> indices;
      for (int64_t i = 0; i < size; ++i)
        if (train_set[i].difficulty == difficulty) indices.push_back(i);
      parts.push_back({"difficulty " + std::to_string(difficulty), indices});
    }
  } else {
    std::vector<int64_t> indices(size);
    for (int64_t i = 0; i < size; ++i) indices[i] = i;
    parts.push_back({"the training prompts", indices});
  }
  std::vector<CurriculumStage> stages;
  for (size_t k = 0; k < parts.size(); ++k) {
    auto& [name, indices] = parts[k];
    if (parts.size() > 1)
      usage_check(static_cast<int64_t>(indices.size()) >= config.data.train_batch_size,
                  "data.curriculum: stage " + std::to_string(k + 1) + " (" + name + ") has " +
                      std::to_string(indices.size()) +
                      " prompts, fewer than data.train_batch_size=" + std::to_string(config.data.train_batch_size) +
                      (c.difficulties.empty() ? ""
                                              : " (the generated prompts cover data.min_difficulty.."
                                                "max_difficulty; data.train_size sets how many)"));
    const int64_t count = static_cast<int64_t>(indices.size());
    stages.push_back({name, std::move(indices), StepSchedule(config, shape, count)});
  }
  return stages;
}

int64_t curriculum_stage_of(const Config& config, int64_t stages, int64_t step) {
  const int64_t per_stage = config.data.curriculum.steps_per_stage;
  return per_stage > 0 ? std::min((step - 1) / per_stage, stages - 1) : 0;
}

RankPrompts stage_prompts(const CurriculumStage& stage, int64_t index, const std::vector<TaskSample>& train_set,
                          const Tokenizer& tokenizer, const Config& config, const Context& context) {
  return rank_share(stage.schedule.prompt_indices(index + 1), &stage.indices, train_set, tokenizer, config,
                    stage.schedule.dispatch_block(), context);
}

}  // namespace ppo
