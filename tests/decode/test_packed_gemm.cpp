// Tests of decode/packed_gemm.h: the packed product against ATen's matmul (PyTorch eager's), over tile and panel
// remainders, with and without accumulation and bias, and strided rows.
#include <catch2/catch.hpp>

#include "decode/packed_gemm.h"
#include "tests/decode/product_check.h"

TEST_CASE("the packed product equals ATen's matmul within float32 rounding", "[cpu][model]") {
  torch::manual_seed(5);
  const double worst = ppo_test::check_against_matmul(
      [](const torch::Tensor& w, const torch::Tensor& bias) {
        const ppo::PackedWeight packed = ppo::pack_weight(w.t());
        REQUIRE(packed.rows == w.size(1));
        REQUIRE(packed.cols == w.size(0));
        return ppo_test::Products{[packed](const torch::Tensor& a, const torch::Tensor& out, bool accumulate) {
                                    ppo::packed_matmul(a, packed, out, accumulate);
                                  },
                                  [packed, bias](const torch::Tensor& a, const torch::Tensor& out, bool accumulate) {
                                    ppo::packed_matmul(a, packed, out, accumulate, bias);
                                  }};
      },
      {1, 3, 4, 5, 8, 9, 16, 33});
  WARN("packed product vs matmul, max |diff|: " << worst);
}
