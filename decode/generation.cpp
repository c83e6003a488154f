#include "decode/generation.h"

#include <algorithm>

namespace ppo {

int64_t decode_cache_width(int64_t prompt_width, int64_t max_new_tokens, bool multi_turn) {
  const int64_t window = prompt_width + (multi_turn ? 2 : 1) * max_new_tokens;
  return window + std::max<int64_t>(1, window / 2);
}

double kv_cache_bytes(const ModelConfig& mc, int64_t width, int64_t sequences) {
  const double element = mc.dtype == "float32" ? 4 : 2;
  return 2.0 * static_cast<double>(mc.num_layers * mc.num_kv_heads * head_dim_of(mc)) * element *
         static_cast<double>(width) * static_cast<double>(sequences);
}

}  // namespace ppo
