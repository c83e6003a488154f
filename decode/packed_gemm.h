// A float32 matrix product on the CPU for the few rows of a decode step, against a weight packed once: the weight
// [K, N] is laid out as panels of 16 columns ([ceil(N / 16), K, 16], the last panel padded with zeros), so that the
// product streams each panel once, contiguous, with no per-call packing (OpenBLAS's sgemm packs its operand on every
// call, longer than its kernel runs at 16 rows), and prefetches the next panel while it multiplies one. Built for
// AVX-512, AVX2 with FMA and baseline x86-64, picked at load time.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace ppo {

struct PackedWeight {
  torch::Tensor panels;  // [ceil(N / 16), K, 16] float32
  int64_t rows = 0;      // K
  int64_t cols = 0;      // N
};

// Packs `operand` [K, N] (float32 on the CPU, any strides).
PackedWeight pack_weight(const torch::Tensor& operand);

// out [M, N] (+)= a [M, K] w, a and out with contiguous rows (float32 on the CPU): with `accumulate` the product is
// added to out, else written over it; `bias` [N] (may be undefined) is added too. No ATen op runs.
void packed_matmul(const torch::Tensor& a, const PackedWeight& w, const torch::Tensor& out, bool accumulate,
                   const torch::Tensor& bias = {});

}  // namespace ppo
