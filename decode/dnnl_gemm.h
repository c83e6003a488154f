// A float32 matrix product on the CPU for the decode step and the prefills, by oneDNN's matmul primitive against a
// weight reordered once into the layout the primitive chooses (Debian's libdnnl, the oneDNN that Debian's LibTorch
// loads). Only where the build links that oneDNN (PPO_WITH_DNNL) and the primitive it picks is its brgemm kernel (an
// AVX-512 or AMX machine): elsewhere dnnl_pack returns an empty weight and the caller keeps the packed loop
// (decode/packed_gemm.h). The layout and the kernel do not depend on the row count, so a row's result is the same
// bits whatever rows it is multiplied beside (a decode step of any width, a prefill) and whatever the thread count
// (tests/decode/test_dnnl_gemm.cpp).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

namespace ppo {

struct DnnlWeightState;  // the reordered weight, its bias and the primitives made for it (dnnl_gemm.cpp)

struct DnnlWeight {
  std::shared_ptr<DnnlWeightState> state;  // null: not packed
  int64_t rows = 0;                        // K
  int64_t cols = 0;                        // N
  explicit operator bool() const { return state != nullptr; }
};

// The oneDNN kernel this build and machine multiply with ("brg:avx512_core"), or why there is none.
std::string dnnl_kernel();

// `operand` [K, N] (float32 on the CPU, any strides) reordered once, with `bias` [N] (may be undefined) added by each
// product; empty where this build or machine has no oneDNN brgemm kernel.
DnnlWeight dnnl_pack(const torch::Tensor& operand, const torch::Tensor& bias);

// out [M, N] (+)= a [M, K] w (+ bias), a and out float32 with contiguous rows: with `accumulate` the product is added
// to out, else written over it.
void dnnl_matmul(const torch::Tensor& a, const DnnlWeight& w, const torch::Tensor& out, bool accumulate);

}  // namespace ppo
