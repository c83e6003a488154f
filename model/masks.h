// Attention masks: which keys each query may attend to (causal, padding, Mistral's sliding window) and the additive
// bias that says it, as the attention kernels (model/attention.h) and the packed sequences' plan (model/packing.h)
// build it.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace ppo {

// The lowest finite value of `dtype` (float32, bfloat16 or float16): what masked positions of an additive attention
// mask hold.
double mask_value(torch::ScalarType dtype);
// 0 where allowed, else the lowest finite value of `dtype`. allowed [B, 1, T, T_total] bool.
torch::Tensor attention_bias(const torch::Tensor& allowed, torch::ScalarType dtype);
// allowed[b, 0, i, j] = key j is not in query i's future AND attention_mask[b, j] == 1, for attention_mask
// [B, T_total] and T queries. Query i sits at absolute position past + i, past = T_total - T. With a sliding
// window W > 0 (model.sliding_window), also key j is one of the W last: past + i - j < W (a row's real tokens are
// contiguous, so columns apart are positions apart).
torch::Tensor attention_allowed(const torch::Tensor& attention_mask, int64_t T, int64_t sliding_window = 0);

}  // namespace ppo
