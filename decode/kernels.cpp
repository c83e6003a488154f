// The decode step's CPU kernels (decode/kernels.h): float32 loops straight on tensors' memory, vectorised by the
// compiler for AVX-512, AVX2 and baseline x86-64 and picked at load time.
#include "decode/kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace ppo {

namespace {

// sum of a[d] * b[d] over `dim` floats, with eight partial sums so that the compiler vectorises it (inlined into
// the target clones below, and vectorised for each).
inline __attribute__((always_inline)) float dot_product(const float* a, const float* b, int64_t dim) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t d = 0;
  for (; d + 8 <= dim; d += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[d + j] * b[d + j];
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; d < dim; ++d) sum += a[d] * b[d];
  return sum;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PPO_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PPO_VECTOR_CLONES
#endif

// 8 floats as one value (GCC's vector extension), loaded from any address (a macro: a function returning one would
// change the ABI of the baseline build, -Wpsabi).
typedef float Lanes8 __attribute__((vector_size(32)));
typedef float UnalignedLanes8 __attribute__((vector_size(32), aligned(4)));
typedef int Index8 __attribute__((vector_size(32)));

#define PPO_LOAD8(p) (*reinterpret_cast<const UnalignedLanes8*>(p))

// The lane sums of 8 vectors, in one: out[j] = sum of a[j]'s lanes, added in dot_product's order ((0 + 1) + (2 + 3))
// + ((4 + 5) + (6 + 7)), by three rounds of shuffles that add neighbouring lanes of two vectors at a time.
#if defined(__clang__)
#define PPO_SHUFFLE8(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define PPO_SHUFFLE8(a, b, ...) __builtin_shuffle(a, b, Index8{__VA_ARGS__})
#endif
inline __attribute__((always_inline)) void lane_sums(const Lanes8 (&a)[8], Lanes8& sums) {
  Lanes8 pairs[4], quads[2];
  for (int i = 0; i < 4; ++i)
    pairs[i] = PPO_SHUFFLE8(a[2 * i], a[2 * i + 1], 0, 8, 2, 10, 4, 12, 6, 14) +
               PPO_SHUFFLE8(a[2 * i], a[2 * i + 1], 1, 9, 3, 11, 5, 13, 7, 15);
  for (int i = 0; i < 2; ++i)
    quads[i] = PPO_SHUFFLE8(pairs[2 * i], pairs[2 * i + 1], 0, 1, 8, 9, 4, 5, 12, 13) +
               PPO_SHUFFLE8(pairs[2 * i], pairs[2 * i + 1], 2, 3, 10, 11, 6, 7, 14, 15);
  sums = PPO_SHUFFLE8(quads[0], quads[1], 0, 1, 2, 3, 8, 9, 10, 11) +
         PPO_SHUFFLE8(quads[0], quads[1], 4, 5, 6, 7, 12, 13, 14, 15);
}

// score_keys for a head dim of 8 C, 8 keys at a time: their dot products' lane sums taken together (the same sums, in
// the same order, as dot_product's). Returns the keys scored, a multiple of 8; score_keys does the rest one by one.
template <int C>
inline __attribute__((always_inline)) int64_t score_keys_by_8(const float* q, int64_t queries, const float* k,
                                                              int64_t stride, int64_t count, float norm,
                                                              const float* bias, int64_t bias_stride, float* out) {
  int64_t l = 0;
  for (; l + 8 <= count; l += 8)
    for (int64_t r = 0; r < queries; ++r) {
      const float* query = q + r * 8 * C;
      Lanes8 partial[8];
      for (int j = 0; j < 8; ++j) {
        const float* key = k + (l + j) * stride;
        partial[j] = PPO_LOAD8(key) * PPO_LOAD8(query);
        for (int c = 1; c < C; ++c) partial[j] += PPO_LOAD8(key + 8 * c) * PPO_LOAD8(query + 8 * c);
      }
      Lanes8 sums;
      lane_sums(partial, sums);
      for (int j = 0; j < 8; ++j) {
        const float mask = bias[(l + j) * bias_stride];  // masked: score + lowest == lowest
        out[r * count + l + j] = mask < -1e38f ? mask : sums[j] / norm + mask;
      }
    }
  return l;
}

// weigh_values for a head dim of 8 C: each query's output held in registers while the keys' values go by (the same
// sums, in the same order).
template <int C>
inline __attribute__((always_inline)) void weigh_values_by_8(const float* w, int64_t queries, const float* v,
                                                             int64_t stride, int64_t count, float* out) {
  for (int64_t r = 0; r < queries; ++r) {
    Lanes8 acc[C] = {};
    const float* weights = w + r * count;
    for (int64_t l = 0; l < count; ++l) {
      const float wl = weights[l];
      if (wl == 0.0f) continue;  // exp(lowest - max) of a masked key: adds exactly nothing
      const float* value = v + l * stride;
      for (int c = 0; c < C; ++c) acc[c] += wl * PPO_LOAD8(value + 8 * c);
    }
    for (int c = 0; c < C; ++c)
      for (int j = 0; j < 8; ++j) out[r * 8 * C + 8 * c + j] = acc[c][j];
  }
}

// weigh_values_by_8 for the one C of `Cs` with dim == 8 C; false (nothing done) when none matches.
template <int... Cs>
inline __attribute__((always_inline)) bool weigh_values_blocked(int64_t dim, const float* w, int64_t queries,
                                                                const float* v, int64_t stride, int64_t count,
                                                                float* out) {
  return ((dim == 8 * Cs ? (weigh_values_by_8<Cs>(w, queries, v, stride, count, out), true) : false) || ...);
}

// score_keys_by_8 for the one C of `Cs` with dim == 8 C (the head dims of the models this runs); 0 keys scored when
// none matches.
template <int... Cs>
inline __attribute__((always_inline)) int64_t score_keys_blocked(int64_t dim, const float* q, int64_t queries,
                                                                 const float* k, int64_t stride, int64_t count,
                                                                 float norm, const float* bias, int64_t bias_stride,
                                                                 float* out) {
  int64_t l = 0;
  ((dim == 8 * Cs ? (l = score_keys_by_8<Cs>(q, queries, k, stride, count, norm, bias, bias_stride, out), true)
                  : false) ||
   ...);
  return l;
}

// The scores of `queries` queries (rows `dim` apart) against `count` keys (rows `stride` apart), divided by `norm`
// plus the additive mask, into out [queries, count]; each key is read once for all the queries of its group, masked
// keys (the mask holds float32's lowest) cost nothing, and their score is the mask.
PPO_VECTOR_CLONES
void score_keys(const float* q, int64_t queries, const float* k, int64_t stride, int64_t count, int64_t dim, float norm,
                const float* bias, int64_t bias_stride, float* out) {
  int64_t l = score_keys_blocked<2, 4, 8, 16>(dim, q, queries, k, stride, count, norm, bias, bias_stride, out);
  for (; l < count; ++l) {
    const float mask = bias[l * bias_stride];
    const float* key = k + l * stride;
    for (int64_t r = 0; r < queries; ++r)  // a masked key: score + lowest == lowest, so skip the dot product
      out[r * count + l] = mask < -1e38f ? mask : dot_product(q + r * dim, key, dim) / norm + mask;
  }
}

// out[r][d] = sum over l of w[r][l] * v[l][d] for `queries` rows of weights w [queries, count], rows of v `stride`
// apart.
PPO_VECTOR_CLONES
void weigh_values(const float* w, int64_t queries, const float* v, int64_t stride, int64_t count, int64_t dim,
                  float* out) {
  if (weigh_values_blocked<2, 4, 8, 16>(dim, w, queries, v, stride, count, out)) return;
  for (int64_t d = 0; d < queries * dim; ++d) out[d] = 0;
  for (int64_t l = 0; l < count; ++l) {
    const float* value = v + l * stride;
    for (int64_t r = 0; r < queries; ++r) {
      const float wl = w[r * count + l];
      if (wl == 0.0f) continue;  // exp(lowest - max) of a masked key: adds exactly nothing
      float* o = out + r * dim;
      for (int64_t d = 0; d < dim; ++d) o[d] += wl * value[d];
    }
  }
}

// x * cos + [x2, x1] * sin' for `heads` heads of `dim` floats in place (apply_rotary's maths, the same roundings).
PPO_VECTOR_CLONES
void rotate_heads(float* x, const float* cos, const float* sin, int64_t heads, int64_t dim) {
  const int64_t half = dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* first = x + h * dim;
    float* second = first + half;
    for (int64_t d = 0; d < half; ++d) {
      const float a = first[d], b = second[d];
      first[d] = a * cos[d] + b * sin[d];
      second[d] = b * cos[half + d] + a * sin[half + d];
    }
  }
}

}  // namespace

// out[r] = weight * x[r] / sqrt(mean(x[r]^2) + eps) for `rows` rows of `dim` floats.
PPO_VECTOR_CLONES
void rms_norm_rows(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * dim;
    const float inv_rms = 1.0f / std::sqrt(dot_product(in, in, dim) / static_cast<float>(dim) + eps);
    for (int64_t d = 0; d < dim; ++d) out[r * dim + d] = weight[d] * (in[d] * inv_rms);
  }
}

bool decode_kernels_apply(const torch::Tensor& activations, const torch::Tensor& cache_keys) {
  return activations.is_cpu() && activations.scalar_type() == torch::kFloat && cache_keys.is_cpu() &&
         cache_keys.scalar_type() == torch::kFloat && !torch::GradMode::is_enabled();
}

// For each row s and kv head g, its n_rep query heads score the keys, take the softmax and average the values.
void decode_attention_cpu(const DecodeAttention& a, int64_t count) {
  const torch::Tensor &k = a.keys, &v = a.values, &bias = a.bias;
  TORCH_CHECK(k.stride(3) == 1 && v.stride(3) == 1, "decode_attention_cpu: key and value rows must be contiguous");
  TORCH_CHECK(count >= 1 && count <= k.size(2), "decode_attention_cpu: ", count, " keys of ", k.size(2));
  TORCH_CHECK(k.size(0) >= a.rows && bias.size(0) >= a.rows, "decode_attention_cpu: too few cache or mask rows");
  const int64_t G = a.kv_heads, n_rep = a.n_rep, Dh = a.head_dim;
  const float norm = static_cast<float>(std::sqrt(double(Dh)));
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  const float* bp = bias.data_ptr<float>();
  at::parallel_for(0, a.rows * G, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> w(static_cast<size_t>(n_rep * count));
    for (int64_t i = begin; i < end; ++i) {
      const int64_t s = i / G, g = i % G;
      const float* keys = kp + s * k.stride(0) + g * k.stride(1);
      const float* values = vp + s * v.stride(0) + g * v.stride(1);
      score_keys(a.q + s * a.q_row + g * n_rep * Dh, n_rep, keys, k.stride(2), count, Dh, norm, bp + s * bias.stride(0),
                 bias.stride(1), w.data());
      for (int64_t r = 0; r < n_rep; ++r) {
        float* row = w.data() + r * count;
        const float top = *std::max_element(row, row + count);
        float sum = 0;
        // exp(lowest - top) of a masked key is exactly 0 unless every key is masked (then all are equal): written
        // without calling exp, whose underflow path is slow.
        for (int64_t l = 0; l < count; ++l)
          sum += (row[l] = row[l] < -1e38f && top >= -1e38f ? 0.0f : std::exp(row[l] - top));
        for (int64_t l = 0; l < count; ++l) row[l] /= sum;
      }
      weigh_values(w.data(), n_rep, values, v.stride(2), count, Dh, a.out + s * G * n_rep * Dh + g * n_rep * Dh);
    }
  });
}

void rotate_and_store_cpu(const torch::Tensor& qkv, int64_t heads, int64_t kv_heads, const torch::Tensor& cos,
                          const torch::Tensor& sin, const torch::Tensor& positions, const torch::Tensor& keys,
                          const torch::Tensor& values, int64_t at) {
  const int64_t S = qkv.size(0), Dh = cos.size(1);
  TORCH_CHECK(qkv.stride(1) == 1 && qkv.size(1) == (heads + 2 * kv_heads) * Dh && cos.is_contiguous() &&
                  sin.is_contiguous() && keys.stride(3) == 1 && values.stride(3) == 1 && keys.size(0) >= S && at >= 0 &&
                  at < keys.size(2),
              "rotate_and_store_cpu: unexpected layout");
  float* x = qkv.data_ptr<float>();
  const float* c = cos.data_ptr<float>();
  const float* s_table = sin.data_ptr<float>();
  const int64_t* pos = positions.data_ptr<int64_t>();
  float* kp = keys.data_ptr<float>();
  float* vp = values.data_ptr<float>();
  const size_t head_bytes = sizeof(float) * static_cast<size_t>(Dh);
  for (int64_t s = 0; s < S; ++s) {
    float* row = x + s * qkv.stride(0);
    TORCH_CHECK(pos[s] >= 0 && pos[s] < cos.size(0), "rotate_and_store_cpu: position ", pos[s], " out of range");
    rotate_heads(row, c + pos[s] * Dh, s_table + pos[s] * Dh, heads + kv_heads, Dh);
    for (int64_t g = 0; g < kv_heads; ++g) {
      std::memcpy(kp + s * keys.stride(0) + g * keys.stride(1) + at * keys.stride(2), row + (heads + g) * Dh,
                  head_bytes);
      std::memcpy(vp + s * values.stride(0) + g * values.stride(1) + at * values.stride(2),
                  row + (heads + kv_heads + g) * Dh, head_bytes);
    }
  }
}

}  // namespace ppo
