// Validation: generation over the validation prompts, scored by the task, and the masked statistics the step
// metrics share.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/config.h"
#include "model/transformer.h"
#include "parallel/context.h"
#include "rl/metrics.h"
#include "tasks/reward.h"
#include "tasks/task.h"
#include "text/tokenizer.h"
#include "train/experience.h"

namespace ppo {

class ToolEnvironment;  // train/multi_turn.h

// Validation result, by data source (a task's own samples: the task's name): val/<source>/score/mean,
// val/<source>/acc/mean, val/<source>/acc/<difficulty>, ... (acc is NaN where the reward never says what correct is).
using ValMetrics = std::map<std::string, double>;

// The data sources of `samples` (rewarder.source_of), sorted.
std::vector<std::string> data_sources(const std::vector<TaskSample>& samples, const Rewarder& rewarder);

// Where the policy's weights come from: actor.init_checkpoint, else model.path, else the seeded initialisation.
std::string model_source(const Config& config);

// A UsageError naming `what` (the model's source) when `model` gives non-finite logits on the first of `samples`:
// its weights hold NaN or inf, or its config's values make them overflow. One forward before any generation, so a
// broken model is never evaluated as if it were fine.
void check_logits_finite(CausalLM& model, const std::vector<TaskSample>& samples, const Tokenizer& tokenizer,
                         const Config& config, torch::Device device, const std::string& what);

// Greedy (or rollout.val_temperature) generation over `samples` in batches of data.val_batch_size, each decoded in
// one continuous-batching generation (validation_wave_size: every row of the batch at once unless
// rollout.max_num_seqs or rollout.max_kv_tokens bound it), scored by the rewarder, reduced over all ranks. With
// samples_per_prompt = k > 1, each prompt is sampled k times (at rollout.val_temperature, or rollout.temperature when
// that is 0) and val/<source>/pass@1/... (the mean correctness of the samples) and val/<source>/pass@k/... (the
// fraction of prompts with at least one correct sample) are added; acc, format_ok and score are then means over all
// samples. An external program's extra fields give val/<source>/<field>/mean. With show_progress, rank 0 prints a
// progress line with an ETA to standard error. `environment`: rollout.multi_turn's program (required when that is on).
ValMetrics evaluate(CausalLM& model, const std::vector<TaskSample>& samples, Rewarder& rewarder,
                    const Tokenizer& tokenizer, const Config& config, Context& context, ToolEnvironment* environment,
                    int64_t samples_per_prompt = 1, bool show_progress = false);

// The reward-side statistics by data source, over all ranks: <prefix><source>/score/mean, <prefix><source>/acc/mean
// (over the responses whose reward says what correct is; NaN when none does) and <prefix><source>/<field>/mean for
// each extra field of an external program (over the responses that have it). extras_only: just the extra fields.
// Every data source in `sources` gets its score and acc, so every rank adds the same names.
void add_reward_metrics(Metrics& m, const std::string& prefix, const std::vector<RowReward>& rows,
                        const std::vector<std::string>& sources, Context& context, bool extras_only = false);

// Tool use per trajectory of a multi-turn batch, as (name, one value per row): turns, calls (answered), call_ratio
// (1 where the trajectory called at all), reward (the environment's) and appended_tokens (tool and template tokens).
// Empty for a batch of single-turn rollouts.
std::vector<std::pair<std::string, torch::Tensor>> tool_use(const Batch& batch);

// <name>/mean, /max and /min over the entries where `mask` is 1 (real rows [B], or real tokens [B, R]), reduced over
// all ranks.
void add_masked_stats(Metrics& m, const std::string& name, const torch::Tensor& values, const torch::Tensor& mask);

// The accuracy table by difficulty that `ppo eval` and `ppo sft` print (with pass@1 and pass@k columns when
// samples_per_prompt = k > 1).
// One table per data source when there are several.
void print_val_table(const ValMetrics& val, const std::vector<TaskSample>& samples, const Rewarder& rewarder,
                     int64_t samples_per_prompt = 1);
// Two validations side by side by difficulty (the trainer's before/after table): accuracy and score of each.
void print_val_comparison(const ValMetrics& before, const std::string& before_label, const ValMetrics& after,
                          const std::string& after_label, const std::vector<TaskSample>& samples,
                          const Rewarder& rewarder);

}  // namespace ppo
