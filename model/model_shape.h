// A model's shape (the model.* keys) checked and counted, without building it: the checks that refuse a shape the
// network cannot take, the parameter counts the planner and the memory checks use, and model.dtype's torch type.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "common/model_config.h"

namespace ppo {

// model.model_type with "auto" resolved: qwen2 with attention biases, else llama.
std::string resolved_model_type(const ModelConfig& config);

// Throws UsageError naming the offending model.* keys (divisibility of heads, even head_dim, sizes, dtype).
void validate_model_config(const ModelConfig& config, int64_t vocab_size);
// The parameters of a CausalLM of this shape (a ValueModel's differ by the head only); with `active`, an MoE model's
// counts only the num_experts_per_tok experts a token runs through.
double model_parameters(const ModelConfig& config, int64_t vocab_size, bool active = false);
// Its parts: one decoder layer's attention (q/k/v/o, their biases and q/k norms), and the MLPs of all layers together
// (dense ones, and an MoE layer's router and experts: with `active`, num_experts_per_tok of them).
double attention_parameters(const ModelConfig& config);
double mlp_parameters(const ModelConfig& config, bool active = false);
// A UsageError naming the size keys when the model's float32 parameters alone exceed the memory this process may
// still allocate (MemAvailable, or a cgroup's limit): LibTorch's allocator would otherwise fail with a backtrace.
// `shards` > 1: a ZeRO-3 build, which holds 1 / shards of them.
void check_model_fits_memory(const ModelConfig& config, int64_t vocab_size, int64_t shards = 1);

// model.dtype -> torch dtype; throws UsageError listing the valid names.
torch::Dtype model_dtype(const std::string& name);

}  // namespace ppo
