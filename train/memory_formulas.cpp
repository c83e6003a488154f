// See train/memory_formulas.h.
#include "train/memory_formulas.h"

#include <algorithm>
#include <cmath>

#include "model/model_shape.h"
#include "model/transformer.h"

namespace ppo::memory {

Shape shape_of(const ModelConfig& m, int64_t vocab_size) {
  Shape s;
  s.D = static_cast<double>(m.hidden_size);
  s.I = static_cast<double>(m.intermediate_size);
  s.H = static_cast<double>(m.num_heads);
  s.Dh = static_cast<double>(head_dim_of(m));
  s.Q = s.H * s.Dh;
  s.kv = static_cast<double>(m.num_kv_heads) * s.Dh;
  s.L = static_cast<double>(m.num_layers);
  s.V = static_cast<double>(vocab_size);
  s.b = m.dtype == "float32" ? 4 : 2;
  s.sdpa = use_sdpa(m.attn_implementation);
  // An MoE model's layers are counted at their mean: E experts (3 D I_e each) and a router (E D) in its MoE layers,
  // the dense MLP in the others; its largest tensor may be a layer's stacked experts (E 2 I_e D).
  const double E = static_cast<double>(m.moe.num_experts), I_e = static_cast<double>(expert_intermediate_size(m));
  s.layer_params = attention_parameters(m) + mlp_parameters(m) / s.L + 2 * s.D;
  s.root_params = s.V * s.D * (m.tie_word_embeddings ? 1 : 2) + s.D;
  s.max_tensor = std::max({s.V * s.D, s.D * s.I, E * 2 * I_e * s.D});
  return s;
}

double padded_slice(double n, double W) {
  return std::ceil(n / W);
}

double layer_saved(const Shape& s, double T) {
  const double elements = 6 * s.D + 4 * s.Q + 4 * s.kv + 4 * s.I;
  const double scores = s.sdpa ? 4 * s.H : 4 * s.H * T + (s.b != 4 ? s.b * s.H * T : 0);
  return s.b * elements + scores;
}

double layer_backward_work(const Shape& s, double T) {
  return s.b * (2 * s.I + s.D) + (s.sdpa ? 0 : 4 * s.H * T);
}

double forward_inputs(const Shape& s, double T) {
  return 6 * T + 2 * s.Dh * s.b;
}

double layer_no_grad_work(const Shape& s, double T, bool fused) {
  const double attention = s.b * (6 * s.D + 3 * s.kv) + (s.sdpa ? 0 : 8 * s.H * T);
  const double mlp = fused ? s.b * (4 * s.D + 2 * s.I) : s.b * (5 * s.D + 4 * s.I);
  return std::max(attention, mlp) + forward_inputs(s, T);
}

double head_no_grad_work(const Shape& s) {
  return 12 * s.V + (s.b != 4 ? s.b * s.V : 0);
}

double head_saved(const Shape& s) {
  return 8 * s.V + s.b * s.D;
}

double head_backward_work(const Shape& s) {
  return 12 * s.V;
}

double sampling_work(const Shape& s) {
  return (4 + 4 + 4 + 8 + 8 + 1) * s.V;
}

double decode_buffer_work(const Shape& s, double cb) {
  const double product = cb != s.b ? s.D : 0;
  return s.b * s.D + cb * (s.D + s.Q + 2 * s.kv + s.Q + 3 * s.I + product + s.V) + (cb != 4 ? 4 * s.V : 0);
}

}  // namespace ppo::memory
