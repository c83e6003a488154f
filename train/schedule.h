// The step schedule of a run, one for PPO training and SFT: how many steps, which prompts each step takes, and when
// it validates and saves. Steps are numbered 1..total_steps, as training/global_step and global_step_N.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "parallel/context.h"
#include "tasks/task.h"
#include "text/tokenizer.h"
#include "train/config_check.h"
#include "train/prompts.h"

namespace ppo {

class StepSchedule {
 public:
  // trainer.total_training_steps, or total_epochs passes over `dataset_size` prompts in batches of
  // data.train_batch_size (drop-last, as veRL's loader), the run's steps as `shape` has them (a curriculum's).
  // UsageError when the dataset is smaller than one batch.
  StepSchedule(const Config& config, const RunShape& shape, int64_t dataset_size);

  int64_t total_steps() const { return total_steps_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  // The dataset indices of step `step`'s global batch: a seeded permutation per epoch (data.shuffle), or in order.
  std::vector<int64_t> prompt_indices(int64_t step) const;
  int64_t epoch(int64_t step) const { return (step - 1) / steps_per_epoch_; }  // 0-based, as training/epoch
  bool is_last(int64_t step) const { return step == total_steps_; }
  // trainer.test_freq > 0 and (a multiple of it, or the last step).
  bool validates_at(int64_t step) const;
  // trainer.write_checkpoints and (the last step, or a multiple of trainer.save_freq > 0).
  bool saves_at(int64_t step) const;
  int64_t dispatch_block() const { return dispatch_block_; }  // RunShape's: prompts per dispatch block

 private:
  int64_t dataset_size_, batch_size_, steps_per_epoch_, total_steps_, dispatch_block_;
  int64_t test_freq_, save_freq_;
  bool write_checkpoints_, shuffle_;
  uint64_t seed_;
};

// How this rank's role deals a step's `rows` generated rows (prompts, or kept groups) over its ranks: colocated ranks
// in parallel.dispatch_block blocks, padded to the world with parallel.pad_to_world; rollout ranks as one padded
// block, since the trainers deal the responses again (train/roles.h) and each response's seed depends on its
// prompt's position, not on the rank.
struct Dealing {
  int64_t block;
  bool pad_to_world;
};
Dealing generation_dealing(const Config& config, int64_t dispatch_block, const Context& context, int64_t rows);

// This rank's share of step `step`'s global batch of `dataset` (rank_prompts over the dispatch blocks).
RankPrompts step_prompts(const StepSchedule& schedule, int64_t step, const std::vector<TaskSample>& dataset,
                         const Tokenizer& tokenizer, const Config& config, const Context& context);

// A stage of data.curriculum: its prompts (indices into the training set) and its own sampler. Without a
// curriculum, one stage holds every prompt.
struct CurriculumStage {
  std::string name;              // "prompts.jsonl" or "difficulty 3", for messages
  std::vector<int64_t> indices;  // into the training set
  StepSchedule schedule;         // over `indices`
};

// The stages of data.curriculum over `train_set` (file_sizes: the prompts of each data.curriculum.train_files file,
// from load_prompts). UsageError naming the stage when one has fewer prompts than data.train_batch_size.
std::vector<CurriculumStage> curriculum_stages(const Config& config, const RunShape& shape,
                                               const std::vector<TaskSample>& train_set,
                                               const std::vector<int64_t>& file_sizes);

// The stage step `step` (1-based) trains on: each lasts data.curriculum.steps_per_stage steps, the last to the end.
int64_t curriculum_stage_of(const Config& config, int64_t stages, int64_t step);

// This rank's share of generation batch `index` (0-based) of `stage`: batch i takes the prompts the stage's sampler
// gives its step i + 1.
RankPrompts stage_prompts(const CurriculumStage& stage, int64_t index, const std::vector<TaskSample>& train_set,
                          const Tokenizer& tokenizer, const Config& config, const Context& context);

}  // namespace ppo
