// Tests of decode/packed_gemm.h: the packed product against ATen's matmul (PyTorch eager's), over tile and panel
// remainders, with and without accumulation and bias, and strided rows.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "decode/packed_gemm.h"

TEST_CASE("the packed product equals ATen's matmul within float32 rounding", "[cpu][model]") {
  torch::manual_seed(5);
  double worst = 0;
  for (int64_t M : {1, 3, 4, 5, 8, 9, 16, 33})
    for (int64_t K : {1, 7, 64, 300})
      for (int64_t N : {1, 15, 16, 17, 100}) {
        const auto w = torch::randn({N, K});  // [out, in], packed as its transpose, as the decode step does
        const auto a = torch::randn({M, K + 3}).narrow(1, 2, K);  // rows K + 3 apart
        const auto bias = torch::randn({N});
        const ppo::PackedWeight packed = ppo::pack_weight(w.t());
        REQUIRE(packed.rows == K);
        REQUIRE(packed.cols == N);
        const auto expected = torch::matmul(a, w.t());
        const auto base = torch::full({M, N + 2}, 7.0);
        auto out = base.narrow(1, 1, N);  // rows N + 2 apart
        ppo::packed_matmul(a, packed, out, /*accumulate=*/false);
        INFO(M << " x " << K << " x " << N);
        const double tolerance = 1e-5 * std::sqrt(double(K)) * (1 + expected.abs().max().item<double>());
        double diff = (out - expected).abs().max().item<double>();
        CHECK(diff <= tolerance);
        worst = std::max(worst, diff);
        ppo::packed_matmul(a, packed, out, /*accumulate=*/true, bias);  // out = 2 a w + bias
        diff = (out - (2 * expected + bias)).abs().max().item<double>();
        CHECK(diff <= 2 * tolerance);
        CHECK(base.select(1, 0).eq(7.0).all().item<bool>());  // the columns beside out are untouched
        CHECK(base.select(1, N + 1).eq(7.0).all().item<bool>());
      }
  WARN("packed product vs matmul, max |diff|: " << worst);
}
