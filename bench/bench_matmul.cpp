// The packed float32 product of the decode step (decode/packed_gemm.h) against LibTorch's matmul (at::mm, OpenBLAS's
// sgemm on a CPU build, what PyTorch eager runs) on the projections of the benchmark models, side by side in one run:
// the weight packed once against the same weight given to mm as the contiguous [K, N] operand (the faster of its two
// layouts) and as the transpose of the [N, K] weight (nn.Linear's).
//
//   bench_matmul [--rows M ...] [--threads T] [--repeats R]
//
// Prints one JSON line per shape: M, K, N, microseconds per product of each (the best of R rounds of 100) and GFLOP/s,
// and the largest difference between the packed product and mm's.
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "decode/packed_gemm.h"

namespace {

// The best of `repeats` rounds of 100 calls, in microseconds per call.
template <class F>
double best_us(F&& f, int repeats) {
  for (int i = 0; i < 10; ++i) f();
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 100; ++i) f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 100);
  }
  return best * 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> rows;
  int threads = 1, repeats = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--rows" && i + 1 < argc)
      rows.push_back(std::stoll(argv[++i]));
    else if (arg == "--threads" && i + 1 < argc)
      threads = std::stoi(argv[++i]);
    else if (arg == "--repeats" && i + 1 < argc)
      repeats = std::stoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_matmul [--rows M ...] [--threads T] [--repeats R]\n");
      return 2;
    }
  }
  if (rows.empty()) rows = {16, 64};
  torch::set_num_threads(threads);
  torch::manual_seed(0);
  // {K, N}: configs/bench_memory.yaml's q/k/v, o, gate/up and down; Qwen2.5-0.5B's q/k/v, gate/up and down.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{256, 512},  {256, 256},  {256, 1376}, {688, 256},
                                                           {896, 1152}, {896, 9728}, {4864, 896}};
  for (const int64_t M : rows)
    for (const auto& [K, N] : shapes) {
      const auto weight = torch::randn({N, K});  // [out, in]
      const auto operand = weight.t().contiguous();
      const auto a = torch::randn({M, K});
      auto out = torch::empty({M, N}), reference = torch::empty({M, N});
      const ppo::PackedWeight packed = ppo::pack_weight(operand);
      const double packed_us = best_us([&] { ppo::packed_matmul(a, packed, out, /*accumulate=*/false); }, repeats);
      const double mm_us = best_us([&] { at::mm_out(reference, a, operand); }, repeats);
      const double mm_t_us = best_us([&] { at::mm_out(reference, a, weight.t()); }, repeats);
      const double diff = (out - reference).abs().max().item<double>();
      const double flop = 2.0 * static_cast<double>(M * K * N);
      std::printf(
          "{\"rows\":%lld,\"k\":%lld,\"n\":%lld,\"threads\":%d,\"packed_us\":%.1f,\"mm_us\":%.1f,\"mm_transposed_us\":%"
          ".1f,"
          "\"packed_gflops\":%.1f,\"mm_gflops\":%.1f,\"max_diff\":%.3g}\n",
          static_cast<long long>(M), static_cast<long long>(K), static_cast<long long>(N), threads, packed_us, mm_us,
          mm_t_us, flop / packed_us / 1e3, flop / mm_us / 1e3, diff);
    }
  return 0;
}
