// The one typed batch that flows between phases: named tensor fields whose first dimension is the sample.
// Token fields are [B, T] (T = prompt + response or response only); per-sample fields are [B].
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

namespace ppo {

// Field names used across the phases (DESIGN.md): prompts [B, P], responses [B, R], input_ids / attention_mask /
// position_ids [B, P + R], response_mask [B, R] (float), old_log_probs / ref_log_probs / values / token_scores /
// token_rewards / advantages / returns [B, R], and per sample: prompt_index (position in the global batch),
// group_id (responses of one prompt share it), sample_mask (1 real, 0 padding copy), scores, difficulty.
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

}  // namespace ppo
