// What the rl tests share: small float32 tensors, closeness checks that print the max difference, and an allreduce
// over 2 simulated ranks.
#pragma once

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "rl/algorithms.h"

namespace ppo_test {

inline constexpr double kTol = 1e-6;

inline torch::Tensor f32(std::initializer_list<std::initializer_list<double>> rows) {
  std::vector<torch::Tensor> out;
  for (const auto& r : rows) out.push_back(torch::tensor(std::vector<double>(r), torch::kFloat));
  return torch::stack(out);
}

inline torch::Tensor f32v(std::vector<double> v) {
  return torch::tensor(v, torch::kFloat);
}

inline double max_diff(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kDouble) - want.to(torch::kDouble)).abs().max().item<double>();
}

inline void check_close(const torch::Tensor& got, const torch::Tensor& want, double tol, const std::string& what) {
  REQUIRE(got.sizes() == want.sizes());
  const double d = max_diff(got, want);
  INFO(what << ": max |diff| = " << d << " (tol " << tol << ")\ngot  " << got << "\nwant " << want);
  CHECK(d <= tol);
}

inline void check_scalar(const torch::Tensor& got, double want, double tol, const std::string& what) {
  const double g = got.item<double>();
  INFO(what << ": got " << g << " want " << want << " |diff| = " << std::abs(g - want) << " (tol " << tol << ")");
  CHECK(std::abs(g - want) <= tol);
}

// Simulates a 2-rank allreduce of a function `f(half, reducer)` that calls the reducer exactly once: first run each
// half with a recording reducer to learn its local contribution, then rerun each half with a reducer that adds the
// other half's contribution (what MPI_Allreduce(SUM) would return on both ranks).
template <class F>
inline std::pair<torch::Tensor, torch::Tensor> run_two_ranks(F f) {
  torch::Tensor local[2];
  for (int r = 0; r < 2; ++r) {
    int calls = 0;
    f(r, ppo::SumReducer([&](const torch::Tensor& t) {
        ++calls;
        local[r] = t.clone();
        return t;
      }));
    REQUIRE(calls == 1);
  }
  torch::Tensor out[2];
  for (int r = 0; r < 2; ++r) {
    out[r] = f(r, ppo::SumReducer([&](const torch::Tensor& t) { return t + local[1 - r]; }));
  }
  return {out[0], out[1]};
}

}  // namespace ppo_test
