#include "decode/packed_gemm.h"

#include <ATen/Parallel.h>

#include <algorithm>

namespace ppo {

namespace {

constexpr int64_t kPanel = 16;  // columns per panel: one AVX-512 register of floats, two of AVX2

// 16 floats as one value: GCC's vector extension, lowered to one AVX-512 register, two AVX2 ones or four SSE ones.
// This file is compiled with -ffp-contract=fast (CMakeLists.txt), so that acc += a * b is one fused multiply-add.
typedef float Lanes __attribute__((vector_size(kPanel * sizeof(float))));

// out[r][j] (+)= sum over k of a[r][k] * panel[k][j] (+ bias[j]) for r < rows (<= R) and j < cols (<= 16): R
// accumulators of 16 floats, one fused multiply-add each per k. Rows beyond `rows` read row 0 and are not written.
// Inlined into one function per instruction set below.
template <int R>
inline __attribute__((always_inline)) void tile_product(const float* a, int64_t lda, int64_t rows, const float* panel,
                                                        int64_t K, float* out, int64_t ldo, int64_t cols,
                                                        bool accumulate, const float* bias) {
  const float* row[R];
  for (int r = 0; r < R; ++r) row[r] = r < rows ? a + r * lda : a;
  Lanes acc[R] = {};
  for (int64_t k = 0; k < K; ++k) {
    __builtin_prefetch(panel + (K + k) * kPanel, 0, 0);  // the next panel's line, a panel ahead (harmless past its end)
    const Lanes b = *reinterpret_cast<const Lanes*>(panel + k * kPanel);
    for (int r = 0; r < R; ++r) acc[r] += row[r][k] * b;
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out + r * ldo;
    for (int64_t j = 0; j < cols; ++j) {
      float v = acc[r][j];
      if (bias) v += bias[j];
      o[j] = accumulate ? o[j] + v : v;
    }
  }
}

using TileFunction = void (*)(const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t, int64_t, bool,
                              const float*);

#define PPO_TILE_FUNCTION(name, rows_per_tile, attributes)                                                   \
  attributes void name(const float* a, int64_t lda, int64_t rows, const float* panel, int64_t K, float* out, \
                       int64_t ldo, int64_t cols, bool accumulate, const float* bias) {                      \
    tile_product<rows_per_tile>(a, lda, rows, panel, K, out, ldo, cols, accumulate, bias);                   \
  }

// AVX-512 has 32 registers: 8 accumulators hide the fused multiply-add's latency; AVX2's 16 hold 4 (two each).
PPO_TILE_FUNCTION(tile_baseline, 4, )
#if defined(__x86_64__) && defined(__GNUC__)
PPO_TILE_FUNCTION(tile_avx2, 4, __attribute__((target("avx2,fma"))))
PPO_TILE_FUNCTION(tile_avx512, 8, __attribute__((target("avx512f"))))
#endif

struct Tile {
  TileFunction product;
  int64_t rows;
};

// Picked by the features the CPU has (target_clones' arch= resolver knows Intel's models only, not AMD's).
Tile tile_for_this_cpu() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return {tile_avx512, 8};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return {tile_avx2, 4};
#endif
  return {tile_baseline, 4};
}

const Tile kTile = tile_for_this_cpu();

}  // namespace

PackedWeight pack_weight(const torch::Tensor& operand) {
  TORCH_CHECK(operand.dim() == 2 && operand.is_cpu() && operand.scalar_type() == torch::kFloat,
              "pack_weight: a [K, N] float32 CPU tensor");
  const int64_t K = operand.size(0), N = operand.size(1), P = (N + kPanel - 1) / kPanel;
  torch::NoGradGuard no_grad;
  auto panels = torch::empty({P, K, kPanel}, operand.options());
  const int64_t full = N / kPanel, rest = N - full * kPanel;  // one strided copy of the whole panels, then the last
  if (full > 0)
    panels.narrow(0, 0, full).copy_(operand.narrow(1, 0, full * kPanel).reshape({K, full, kPanel}).permute({1, 0, 2}));
  if (rest > 0) {
    torch::Tensor last = panels.select(0, full);  // [K, 16], zero beyond the weight's last column
    last.narrow(1, rest, kPanel - rest).zero_();
    last.narrow(1, 0, rest).copy_(operand.narrow(1, full * kPanel, rest));
  }
  return {panels, K, N};
}

void packed_matmul(const torch::Tensor& a, const PackedWeight& w, const torch::Tensor& out, bool accumulate,
                   const torch::Tensor& bias) {
  const int64_t M = a.size(0), K = w.rows, N = w.cols;
  TORCH_CHECK(a.dim() == 2 && a.size(1) == K && a.stride(1) == 1 && out.dim() == 2 && out.size(0) == M &&
                  out.size(1) == N && out.stride(1) == 1 && a.scalar_type() == torch::kFloat &&
                  out.scalar_type() == torch::kFloat && (!bias.defined() || bias.numel() == N),
              "packed_matmul: a [M, K] and out [M, N] float32 with contiguous rows");
  const float* ap = a.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const float* panels = w.panels.data_ptr<float>();
  const float* bp = bias.defined() ? bias.data_ptr<float>() : nullptr;
  const int64_t lda = a.stride(0), ldo = out.stride(0), P = w.panels.size(0);
  at::parallel_for(0, P, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t col = p * kPanel, cols = std::min(kPanel, N - col);
      for (int64_t r = 0; r < M; r += kTile.rows)
        kTile.product(ap + r * lda, lda, std::min(kTile.rows, M - r), panels + p * K * kPanel, K, op + r * ldo + col,
                      ldo, cols, accumulate, bp ? bp + col : nullptr);
    }
  });
}

}  // namespace ppo
