#include "model/masks.h"

#include <limits>

namespace ppo {

double mask_value(torch::ScalarType dtype) {
  if (dtype == torch::kHalf) return -65504.0;
  if (dtype == torch::kBFloat16) return -3.3895313892515355e38;
  return double(std::numeric_limits<float>::lowest());
}

torch::Tensor attention_bias(const torch::Tensor& allowed, torch::ScalarType dtype) {
  return torch::zeros(allowed.sizes(), allowed.options().dtype(dtype))
      .masked_fill_(allowed.logical_not(), mask_value(dtype));
}

torch::Tensor attention_allowed(const torch::Tensor& attention_mask, int64_t T, int64_t sliding_window) {
  const int64_t total = attention_mask.size(1), past = total - T;
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(attention_mask.device());
  auto query_pos = torch::arange(past, total, opts).unsqueeze(1);  // [T, 1]
  auto key_pos = torch::arange(0, total, opts).unsqueeze(0);       // [1, T_total]
  auto causal = key_pos.le(query_pos);                             // [T, T_total]
  if (sliding_window > 0) causal.logical_and_(key_pos.gt(query_pos - sliding_window));
  auto real = attention_mask.ne(0).unsqueeze(1).unsqueeze(1);  // [B, 1, 1, T_total]
  return causal.unsqueeze(0).unsqueeze(0).logical_and(real);   // [B, 1, T, T_total]
}

}  // namespace ppo
