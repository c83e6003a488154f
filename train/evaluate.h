// Validation: generation over the validation prompts, scored by the task, and the masked statistics the step
// metrics share.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/config.h"
#include "model/tokenizer.h"
#include "model/transformer.h"
#include "parallel/context.h"
#include "rl/metrics.h"
#include "tasks/task.h"

namespace ppo {

// Validation result: val/<task>/score/mean, val/<task>/acc/mean and val/<task>/acc/<difficulty>.
using ValMetrics = std::map<std::string, double>;

// Greedy (or rollout.val_temperature) generation over `samples` in batches of data.val_batch_size, scored by the
// task, reduced over all ranks. With samples_per_prompt = k > 1, each prompt is sampled k times (at
// rollout.val_temperature, or rollout.temperature when that is 0) and val/<task>/pass@1/... (the mean correctness of
// the samples) and val/<task>/pass@k/... (the fraction of prompts with at least one correct sample) are added; acc,
// format_ok and score are then means over all samples.
ValMetrics evaluate(CausalLM& model, const std::vector<TaskSample>& samples, const Task& task,
                    const Tokenizer& tokenizer, const Config& config, Context& context, int64_t samples_per_prompt = 1);

// <name>/mean, /max and /min over the entries where `mask` is 1 (real rows [B], or real tokens [B, R]), reduced over
// all ranks.
void add_masked_stats(Metrics& m, const std::string& name, const torch::Tensor& values, const torch::Tensor& mask);

// The accuracy table by difficulty that `ppo eval` and `ppo sft` print (with pass@1 and pass@k columns when
// samples_per_prompt = k > 1).
void print_val_table(const ValMetrics& val, const std::vector<TaskSample>& samples, const std::string& task,
                     int64_t samples_per_prompt = 1);
// Two validations side by side by difficulty (the trainer's before/after table): accuracy and score of each.
void print_val_comparison(const ValMetrics& before, const std::string& before_label, const ValMetrics& after,
                          const std::string& after_label, const std::vector<TaskSample>& samples,
                          const std::string& task);

}  // namespace ppo
