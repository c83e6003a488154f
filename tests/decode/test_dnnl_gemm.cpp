// Tests of decode/dnnl_gemm.h: oneDNN's product against ATen's matmul (PyTorch eager's), over row, depth and column
// remainders, with and without accumulation and bias, and strided rows; a row's result the same bits whatever rows
// and threads it is multiplied with; and which product fuse_projection picks.
#include <catch2/catch.hpp>

#include "decode/dnnl_gemm.h"
#include "decode/fused_weights.h"
#include "tests/decode/product_check.h"

namespace {

// Whether this build and machine multiply with oneDNN: its brgemm kernel, in a build that links Debian's oneDNN.
bool have_dnnl() {
  return ppo::dnnl_kernel().rfind("brg", 0) == 0;
}

}  // namespace

TEST_CASE("oneDNN's product equals ATen's matmul within float32 rounding", "[cpu][model]") {
  if (!have_dnnl()) {
    CHECK(!ppo::dnnl_pack(torch::randn({8, 8}), {}));  // no oneDNN kernel: no weight either, the packed loop serves
    WARN("no oneDNN brgemm kernel here: " << ppo::dnnl_kernel());
    return;
  }
  torch::manual_seed(6);
  const double worst = ppo_test::check_against_matmul(
      [](const torch::Tensor& w, const torch::Tensor& bias) {
        const ppo::DnnlWeight plain = ppo::dnnl_pack(w.t(), {}), biased = ppo::dnnl_pack(w.t(), bias);
        REQUIRE(plain);
        REQUIRE(plain.rows == w.size(1));
        REQUIRE(plain.cols == w.size(0));
        const auto product = [](const ppo::DnnlWeight& weight) {
          return [weight](const torch::Tensor& a, const torch::Tensor& out, bool accumulate) {
            ppo::dnnl_matmul(a, weight, out, accumulate);
          };
        };
        return ppo_test::Products{product(plain), product(biased)};
      },
      {1, 3, 16, 33, 100});
  WARN("oneDNN product (" << ppo::dnnl_kernel() << ") vs matmul, max |diff|: " << worst);
}

TEST_CASE("oneDNN's product gives a row the same bits whatever rows and threads it runs with", "[cpu][model]") {
  if (!have_dnnl()) return;  // the case above says why
  torch::manual_seed(7);
  const int threads = torch::get_num_threads();
  for (const auto& [K, N] : {std::pair<int64_t, int64_t>{64, 48}, {896, 1152}, {300, 4096}}) {
    const ppo::DnnlWeight w = ppo::dnnl_pack(torch::randn({K, N}), torch::randn({N}));
    const auto a = torch::randn({64, K});
    const auto all = torch::empty({64, N});
    torch::set_num_threads(1);
    ppo::dnnl_matmul(a, w, all, /*accumulate=*/false);
    for (int64_t M : {1, 5, 16, 33}) {
      for (int t : {1, 2}) {
        torch::set_num_threads(t);
        const auto some = torch::empty({M, N});
        ppo::dnnl_matmul(a.narrow(0, 7, M), w, some, /*accumulate=*/false);
        INFO(K << " x " << N << ", " << M << " rows, " << t << " threads");
        CHECK(torch::equal(some, all.narrow(0, 7, M)));
      }
    }
  }
  torch::set_num_threads(threads);
}

TEST_CASE("fuse_projection multiplies by oneDNN where uses_dnnl says so, elsewhere by the packed loop",
          "[cpu][model]") {
  torch::manual_seed(8);
  CHECK(ppo::uses_dnnl(256, 256, /*rows=*/64));
  CHECK(!ppo::uses_dnnl(256, 256, /*rows=*/32));  // few rows
  CHECK(!ppo::uses_dnnl(64, 128, /*rows=*/64));   // a small weight
  for (const int64_t rows : {16, 64})
    for (const auto& [in, out] : {std::pair<int64_t, int64_t>{256, 256}, {16, 4112}, {64, 128}}) {
      const auto weight = torch::randn({out, in}), bias = torch::randn({out});
      const auto p = ppo::fuse_projection(weight, bias, torch::kFloat, rows);
      INFO(in << " -> " << out << ", " << rows << " rows");
      CHECK(static_cast<bool>(p.dnnl) == (ppo::uses_dnnl(in, out, rows) && have_dnnl()));
      CHECK(p.packed.panels.defined() == !p.dnnl);
      CHECK(p.out_features() == out);
      const auto x = torch::randn({2, 3, in});
      CHECK(torch::allclose(p(x), torch::nn::functional::linear(x, weight, bias), 1e-4, 1e-4));
    }
  const auto half = ppo::fuse_projection(torch::randn({16, 8}), {}, torch::kBFloat16, 64);  // elsewhere: ATen's linear
  CHECK(!half.dnnl);
  CHECK(!half.packed.panels.defined());
  CHECK(half.operand.defined());
}
