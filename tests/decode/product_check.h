// The check that a CPU product of the decode step (decode/packed_gemm.h, decode/dnnl_gemm.h) equals ATen's matmul
// (PyTorch eager's) within float32 rounding, over row, depth and column remainders, with and without accumulation and
// bias, and strided rows; shared by their tests.
#pragma once

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

namespace ppo_test {

// out (+)= a w (+ bias): the product of one laid-out weight.
using Product = std::function<void(const torch::Tensor& a, const torch::Tensor& out, bool accumulate)>;
// The weight's products without and with its bias.
struct Products {
  Product plain, biased;
};

// Lays out `w` [N, K] (its transpose is the [K, N] operand, as the decode step's) and `bias` [N] with `make` and checks
// out = a w, then out += a w + bias, against matmul for every M, K and N below; returns the largest difference.
inline double check_against_matmul(
    const std::function<Products(const torch::Tensor& w, const torch::Tensor& bias)>& make,
    const std::vector<int64_t>& rows) {
  double worst = 0;
  for (int64_t M : rows)
    for (int64_t K : {1, 7, 64, 300})
      for (int64_t N : {1, 15, 16, 17, 100}) {
        const auto w = torch::randn({N, K});
        const auto a = torch::randn({M, K + 3}).narrow(1, 2, K);  // rows K + 3 apart
        const auto bias = torch::randn({N});
        const Products products = make(w, bias);
        const auto expected = torch::matmul(a, w.t());
        const auto base = torch::full({M, N + 2}, 7.0);
        auto out = base.narrow(1, 1, N);  // rows N + 2 apart
        products.plain(a, out, /*accumulate=*/false);
        INFO(M << " x " << K << " x " << N);
        const double tolerance = 1e-5 * std::sqrt(double(K)) * (1 + expected.abs().max().item<double>());
        double diff = (out - expected).abs().max().item<double>();
        CHECK(diff <= tolerance);
        worst = std::max(worst, diff);
        products.biased(a, out, /*accumulate=*/true);  // out = 2 a w + bias
        diff = (out - (2 * expected + bias)).abs().max().item<double>();
        CHECK(diff <= 2 * tolerance);
        CHECK(base.select(1, 0).eq(7.0).all().item<bool>());  // the columns beside out are untouched
        CHECK(base.select(1, N + 1).eq(7.0).all().item<bool>());
      }
  return worst;
}

}  // namespace ppo_test
