// The one typed batch that flows between phases: named tensor fields whose first dimension is the sample.
// Token fields are [B, T] (T = prompt + response or response only); per-sample fields are [B].
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

namespace ppo {

// The field names of the phases (docs/architecture.md), one constant each, so that a misspelt name does not compile.
namespace field {
inline constexpr char prompts[] = "prompts";                        // [B, P] left-padded prompt ids
inline constexpr char responses[] = "responses";                    // [B, R] right-padded response ids
inline constexpr char input_ids[] = "input_ids";                    // [B, P + R]
inline constexpr char attention_mask[] = "attention_mask";          // [B, P + R] int64, 1 on real tokens
inline constexpr char position_ids[] = "position_ids";              // [B, P + R] cumsum(attention_mask) - 1
inline constexpr char response_mask[] = "response_mask";            // [B, R] float, 1 up to and including EOS;
                                                                    // multi-turn: 1 on sampled tokens only
inline constexpr char sample_mask[] = "sample_mask";                // [B] float, 1 real, 0 padding copy
inline constexpr char group_id[] = "group_id";                      // [B] int64, the responses of one prompt share it
inline constexpr char prompt_index[] = "prompt_index";              // [B] int64, position in the global batch
inline constexpr char difficulty[] = "difficulty";                  // [B] int64, the task's difficulty of the prompt
inline constexpr char scores[] = "scores";                          // [B] the task's score of each response
inline constexpr char correct[] = "correct";                        // [B] 1 when the response is correct
inline constexpr char has_correct[] = "has_correct";                // [B] 1 when the reward says what correct is
inline constexpr char format_ok[] = "format_ok";                    // [B] 1 when the response has the task's format
inline constexpr char token_scores[] = "token_scores";              // [B, R] the score on the last response token
inline constexpr char rollout_log_probs[] = "rollout_log_probs";    // [B, R] as the rollout sampled them
inline constexpr char old_log_probs[] = "old_log_probs";            // [B, R] under the policy that sampled
inline constexpr char rollout_is_weights[] = "rollout_is_weights";  // [B, R] rollout-correction weights
inline constexpr char ref_log_probs[] = "ref_log_probs";            // [B, R] under the reference policy
inline constexpr char teacher_log_probs[] = "teacher_log_probs";    // [B, R] under distillation's teacher
// Under a top-k distillation loss: the teacher's k most likely tokens of each position and their log-probs.
inline constexpr char teacher_topk_ids[] = "teacher_topk_ids";              // [B, R, k] int64
inline constexpr char teacher_topk_log_probs[] = "teacher_topk_log_probs";  // [B, R, k]
// [B, P + R, MoE layers, k] int32: the experts the rollout routed each token to, -1 where none was recorded
inline constexpr char routed_experts[] = "routed_experts";
inline constexpr char values[] = "values";                // [B, R] the critic's values
inline constexpr char token_rewards[] = "token_rewards";  // [B, R] token_scores with the KL penalty
inline constexpr char advantages[] = "advantages";        // [B, R]
inline constexpr char returns[] = "returns";              // [B, R]
// ppo rm only (train/rm.h): rows 2i and 2i + 1 are pair i's chosen and rejected sequences.
inline constexpr char margins[] = "margins";  // [B] float, the pair's margin on both of its rows
// Multi-turn rollouts only (train/multi_turn.h):
inline constexpr char tool_turns[] = "tool_turns";    // [B] float, assistant turns of the trajectory
inline constexpr char tool_calls[] = "tool_calls";    // [B] float, tool calls the environment answered
inline constexpr char tool_reward[] = "tool_reward";  // [B] float, the sum of the answers' rewards
inline constexpr char tool_tokens[] = "tool_tokens";  // [B] float, tokens appended (tool messages, template)
}  // namespace field

struct Batch {
  std::map<std::string, torch::Tensor> fields;

  int64_t size() const;  // B; 0 when empty
  bool has(const std::string& name) const { return fields.count(name) > 0; }
  const torch::Tensor& at(const std::string& name) const;  // throws naming the missing field
  void set(const std::string& name, torch::Tensor value);  // checks B matches

  Batch select(const torch::Tensor& rows) const;  // rows: int64 [K]
  Batch slice(int64_t begin, int64_t end) const;
  std::vector<Batch> chunk(int64_t parts) const;  // equal parts; B must divide
  std::vector<Batch> split(int64_t size) const;   // pieces of `size` (last may be smaller)
  static Batch concat(const std::vector<Batch>& parts);
  Batch to(const torch::Device& device) const;
  // Every field has the same first dimension; token fields agree on their widths.
  void check() const;
};

// ---- micro-batches ----

// How a phase cuts its rows into micro-batches: a fixed count, or (max_tokens > 0) a token budget.
struct MicroBatchSpec {
  int64_t size = 1;             // rows per micro-batch when max_tokens is 0
  int64_t max_tokens = 0;       // > 0: the tokens of every micro-batch stay within this budget
  std::string budget_key = "";  // the config key of the budget, for the over-budget warning
  // Token budget: at least this many micro-batches (the largest groups split in halves until there are), so that the
  // ranks of a sharded model run the same number of forwards; 0 = as the budget gives.
  int64_t min_count = 0;
  bool packed = false;  // the phase packs its micro-batches (model/packing.h): a budget counts real tokens
};

struct MicroBatch {
  Batch batch;         // the rows (trimmed of unused padding columns under a token budget)
  torch::Tensor rows;  // [b] int64: their rows in the source batch
};

// The padded width a set of rows needs: its longest prompt + its longest response (prompts are left-padded,
// responses right-padded, so this is the width of the micro-batch once trimmed).
struct RowLengths {
  int64_t prompt = 0;    // real prompt tokens
  int64_t response = 0;  // real response tokens
};

// Token-budget partition (veRL's use_dynamic_bsz with rearrange_micro_batches): the cost of a group is rows x (longest
// prompt + longest response) for padded tensors, or with `packed` its real tokens (the sum of prompt + response
// over its rows). Rows are sorted by total length and cut into contiguous
// groups; the number of groups is the least that greedy packing within `max_tokens` gives, and among cuts with that
// many groups the one with the smallest largest cost is taken (balanced). A row whose own length exceeds the budget
// goes alone into its own group and is listed in `over_budget`. Returns groups of row indices, deterministic.
std::vector<std::vector<int64_t>> partition_by_tokens(const std::vector<RowLengths>& lengths, int64_t max_tokens,
                                                      std::vector<int64_t>* over_budget = nullptr, bool packed = false);

// Per-row prompt/response lengths from attention_mask [B, P + R] with prompts [B, P].
std::vector<RowLengths> row_lengths(const Batch& batch);

// Drops the leading prompt columns no row uses and the trailing response columns no row uses (at least one response
// column stays). Fields: "prompts" [B, P]; "input_ids", "attention_mask", "position_ids" [B, P + R]; every other
// two-dimensional field is response-aligned [B, R]. Results on the kept columns are unchanged: padded keys are
// masked out of attention and positions come from the untrimmed mask.
Batch trim_padding(const Batch& batch);

// The micro-batches of `batch` under `spec`, in processing order. Fixed count: consecutive rows at the batch's full
// width (so results do not depend on which rows share a micro-batch, bit for bit). Token budget: partition_by_tokens,
// each micro-batch trimmed (trim_padding) to the width its budget was counted with, and a warning on stderr for a row
// over the budget.
std::vector<MicroBatch> make_micro_batches(const Batch& batch, const MicroBatchSpec& spec);

// Reassembles per-micro-batch results [b, R', ...] (R' <= R, response-aligned) into [B, R, ...] in source row order;
// the trimmed columns are 0.
torch::Tensor gather_micro_results(const std::vector<MicroBatch>& micros, const std::vector<torch::Tensor>& parts,
                                   int64_t B, int64_t R);

}  // namespace ppo
