// Experience: the rollout phase turns a rank's prompts into a typed Batch of responses (generation), and the reward
// phase scores them with the task.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/batch.h"
#include "common/config.h"
#include "model/transformer.h"
#include "tasks/reward.h"
#include "tasks/task.h"
#include "text/tokenizer.h"
#include "train/multi_turn.h"
#include "train/prompts.h"

namespace ppo {

struct SamplingParams {
  int64_t n = 1;
  double temperature = 1.0;
  int64_t top_k = -1;
  double top_p = 1.0;
  int64_t seed_index = 0;  // mixes into each response's seed: the 0-based step index (global_step - 1)
};
// Sequences decoded together in one generation wave: rollout.max_num_seqs (or rollout.micro_batch_size), lowered so
// that the KV cache of a wave holds at most rollout.max_kv_tokens positions (decode_cache_width per sequence), and at
// least 1. check_config (train/config_check.h) guarantees that one sequence fits.
int64_t generation_wave_size(const Config& config, int64_t prompt_width);
// Validation decodes every row of a batch together: `rows`, lowered by rollout.max_num_seqs (when set) and by
// rollout.max_kv_tokens as above, and at least 1. rollout.micro_batch_size bounds only its prefill forwards.
int64_t validation_wave_size(const Config& config, int64_t prompt_width, int64_t rows);

// How a generation is laid out: the rollout's waves (generation_wave_size), or validation's (validation_wave_size)
// with `on_progress` told of the rows as they finish (GenerationParams::on_progress).
struct GenerationLayout {
  bool validation = false;
  std::function<void(int64_t finished_rows, int64_t decode_steps)> on_progress;
  // rollout.multi_turn: the rank's environment program (train/multi_turn.h); required when multi-turn is on.
  ToolEnvironment* environment = nullptr;
};

// Generates n responses per prompt (the n of a prompt are adjacent rows) and fills the batch fields of
// common/batch.h: prompts, responses, input_ids, attention_mask, position_ids, response_mask, sample_mask, group_id,
// prompt_index, difficulty. Generation runs in waves of generation_wave_size rows (validation_wave_size with
// layout.validation); the batch is in host memory. With rollout.multi_turn each response is a trajectory of
// assistant turns and tool messages (train/multi_turn.h), response_mask is 1 on the sampled tokens only, and the
// batch also has tool_turns, tool_calls and tool_reward.
Batch rollout_batch(CausalLM& model, const Tokenizer& tokenizer, const RankPrompts& prompts,
                    const SamplingParams& sampling, const Config& config, const GenerationLayout& layout = {});

// Decoded response text of row b: up to, not including, EOS; a multi-turn trajectory (a batch with tool_turns) is
// every real token but a last EOS, special tokens written out, as the chat template renders the conversation. Valid
// UTF-8: a character a length limit cut is U+FFFD, as the Hugging Face tokenizers' decode gives it (utf8_lossy).
std::string response_text(const Batch& batch, int64_t row, const Tokenizer& tokenizer);

// Sets the fields scores [B] (float32) to `scores` and token_scores [B, R] to each score on its row's last sampled
// token (the last 1 of response_mask; none on a row without one).
void place_scores(Batch& batch, const torch::Tensor& scores);

// The reward of one real (not padding) row.
struct RowReward {
  int64_t row = 0;
  std::string data_source;
  Score score;
};
// Scores every real row in one call to `rewarder` (one batch for an external program): fields scores, correct,
// has_correct, format_ok [B] and token_scores [B, R] (the score on the last response token). Returns the real rows'
// rewards, for the metrics by data source.
std::vector<RowReward> compute_rewards(Batch& batch, const RankPrompts& prompts, int64_t n, Rewarder& rewarder,
                                       const Tokenizer& tokenizer);

// DAPO dynamic sampling assembles a step's batch from several generation batches, whose prompt widths differ.
// Concatenates `parts` after left-padding the prompt side of each (prompts, input_ids, attention_mask,
// position_ids) to the widest: pad_id, attention 0, position 0, as the rollout pads. Response widths must agree.
Batch concat_generations(const std::vector<Batch>& parts, int64_t pad_id);

// Rank `rank`'s rows of a training batch of whole groups taken from `global` (the same rows on every rank):
// `group_rows` holds the first row of each group (n adjacent rows), in batch order. Group g takes position g of
// the global batch, and the dispatcher (dispatch_positions with block, world, pad) gives the rank its positions,
// exactly as for prompts generated in one piece, so N ranks hold what one rank does. group_id and prompt_index
// become the positions; padding copies (-1 - p) get sample_mask, response_mask and every score 0.
Batch dispatch_groups(const Batch& global, const std::vector<int64_t>& group_rows, int64_t n, int64_t block,
                      int64_t world, int64_t rank, bool pad);

}  // namespace ppo
