// The packed float32 product of the decode step (decode/packed_gemm.h) against LibTorch's matmul (at::mm, OpenBLAS's
// sgemm on Debian's build, MKL's on PyPI's: what PyTorch eager runs) and against the libraries' own pack-once
// products, on the projections of the benchmark models, side by side in one run: the weight packed once against the
// same weight given to mm as the contiguous [K, N] operand (the faster of its two layouts) and as the transpose of the
// [N, K] weight (nn.Linear's); where the build has them, oneDNN's matmul primitive with the weight reordered once into
// the layout it chooses (decode/dnnl_gemm.h, Debian's libdnnl) and MKL's packed sgemm with the weight packed once
// (cblas_sgemm_pack and cblas_sgemm_compute, exported by PyPI's LibTorch, PPO_BENCH_MKL_PACK).
//
//   bench_matmul [--rows M ...] [--shape KxN ...] [--accumulate] [--streamed] [--threads T] [--repeats R]
//
// --accumulate: the packed and oneDNN products add to out (the decode step's o and down projections). --streamed:
// each call multiplies the next of as many copies of the weight as fill 128 MiB, so that the weight comes from memory,
// not from the caches, as in a decode step, whose layers' weights together exceed them. --shape: the weight's K x N
// instead of the projections below (e.g. 576x49152, SmolLM2-135M's LM head). Prints the oneDNN kernel, then one JSON
// line per shape: M, K, N, microseconds per product of each (the best of R rounds of 100; -1 where the build lacks it)
// and GFLOP/s, the largest difference of the packed, oneDNN and MKL products from mm's, and the milliseconds that
// laying out the weight took for the packed loop and for oneDNN (once per generation in the decoder).
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "decode/dnnl_gemm.h"
#include "decode/packed_gemm.h"

#if PPO_BENCH_MKL_PACK
// MKL's packed-GEMM interface (mkl_cblas.h, LP64), as PyPI's libtorch_cpu.so exports it.
extern "C" {
size_t cblas_sgemm_pack_get_size(int identifier, int m, int n, int k);
void cblas_sgemm_pack(int layout, int identifier, int trans, int m, int n, int k, float alpha, const float* src, int ld,
                      float* dest);
void cblas_sgemm_compute(int layout, int transa, int transb, int m, int n, int k, const float* a, int lda,
                         const float* b, int ldb, float beta, float* c, int ldc);
}
#endif

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

#if PPO_BENCH_MKL_PACK
// out = a w by MKL's sgemm with the [K, N] weight packed once (cblas_sgemm_pack), then cblas_sgemm_compute.
struct MklPacked {
  enum { kRowMajor = 101, kNoTrans = 111, kPacked = 151, kBMatrix = 162 };
  std::vector<float> packed;
  int M, K, N;

  MklPacked(int64_t rows, const torch::Tensor& operand)
      : M(static_cast<int>(rows)), K(static_cast<int>(operand.size(0))), N(static_cast<int>(operand.size(1))) {
    packed.resize(cblas_sgemm_pack_get_size(kBMatrix, M, N, K) / sizeof(float) + 1);
    cblas_sgemm_pack(kRowMajor, kBMatrix, kNoTrans, M, N, K, 1.0f, operand.data_ptr<float>(), N, packed.data());
  }
  void operator()(const torch::Tensor& a, const torch::Tensor& out) {
    cblas_sgemm_compute(kRowMajor, kNoTrans, kPacked, M, N, K, a.data_ptr<float>(), K, packed.data(), N, 0.0f,
                        out.data_ptr<float>(), N);
  }
};
#endif

struct Options {
  int threads = 1, repeats = 5;
  bool accumulate = false, streamed = false;
};

// One shape's line: the products' times and differences, and the layouts' times.
void bench_shape(int64_t M, int64_t K, int64_t N, const Options& o) {
  const int repeats = o.repeats;
  const bool accumulate = o.accumulate;
  // With --streamed, copies of the weight that fill 128 MiB, one after the other as a decode step's layers are.
  const int64_t copies = o.streamed ? std::max<int64_t>(1, (int64_t{128} << 20) / (K * N * 4)) : 1;
  std::vector<torch::Tensor> weights, operands;
  std::vector<ppo::PackedWeight> packed;
  std::vector<ppo::DnnlWeight> dnnl;
  double pack_ms = 0, dnnl_pack_ms = 0;  // laying out the first copy: once per generation in the decoder
  for (int64_t c = 0; c < copies; ++c) {
    weights.push_back(torch::randn({N, K}));  // [out, in]
    operands.push_back(weights.back().t().contiguous());
    const auto start = std::chrono::steady_clock::now();
    packed.push_back(ppo::pack_weight(operands.back()));
    const auto packed_at = std::chrono::steady_clock::now();
    dnnl.push_back(ppo::dnnl_pack(operands.back(), {}));
    if (c == 0) {
      pack_ms = std::chrono::duration<double, std::milli>(packed_at - start).count();
      dnnl_pack_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - packed_at).count();
    }
  }
  const auto a = torch::randn({M, K});
  auto out = torch::empty({M, N}), reference = torch::empty({M, N});
  int64_t next = 0;
  const auto turn = [&] { return static_cast<size_t>(next++ % copies); };
  const double packed_us = best_us([&] { ppo::packed_matmul(a, packed[turn()], out, accumulate); }, repeats);
  const double mm_us = best_us([&] { at::mm_out(reference, a, operands[turn()]); }, repeats);
  const double mm_t_us = best_us([&] { at::mm_out(reference, a, weights[turn()].t()); }, repeats);
  at::mm_out(reference, a, operands[0]);
  ppo::packed_matmul(a, packed[0], out, /*accumulate=*/false);
  const double diff = (out - reference).abs().max().item<double>();
  double dnnl_us = -1, dnnl_diff = -1, mkl_us = -1, mkl_diff = -1;
  auto other = torch::zeros({M, N});
  if (dnnl[0]) {
    dnnl_us = best_us([&] { ppo::dnnl_matmul(a, dnnl[turn()], other, accumulate); }, repeats);
    ppo::dnnl_matmul(a, dnnl[0], other, /*accumulate=*/false);
    dnnl_diff = (other - reference).abs().max().item<double>();
  }
#if PPO_BENCH_MKL_PACK
  MklPacked mkl(M, operands[0]);
  mkl_us = best_us([&] { mkl(a, other); }, repeats);
  mkl_diff = (other - reference).abs().max().item<double>();
#endif
  const double flop = 2.0 * static_cast<double>(M * K * N);
  std::printf(
      "{\"rows\":%lld,\"k\":%lld,\"n\":%lld,\"threads\":%d,\"packed_us\":%.1f,\"mm_us\":%.1f,"
      "\"mm_transposed_us\":%.1f,\"dnnl_us\":%.1f,\"mkl_packed_us\":%.1f,\"packed_gflops\":%.1f,"
      "\"mm_gflops\":%.1f,\"max_diff\":%.3g,\"dnnl_max_diff\":%.3g,\"mkl_max_diff\":%.3g,\"pack_ms\":%.3f,"
      "\"dnnl_pack_ms\":%.3f}\n",
      static_cast<long long>(M), static_cast<long long>(K), static_cast<long long>(N), o.threads, packed_us, mm_us,
      mm_t_us, dnnl_us, mkl_us, flop / packed_us / 1e3, flop / mm_us / 1e3, diff, dnnl_diff, mkl_diff, pack_ms,
      dnnl_pack_ms);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> rows;
  std::vector<std::pair<int64_t, int64_t>> shapes;
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--rows" && i + 1 < argc)
      rows.push_back(std::stoll(argv[++i]));
    else if (arg == "--threads" && i + 1 < argc)
      o.threads = std::stoi(argv[++i]);
    else if (arg == "--repeats" && i + 1 < argc)
      o.repeats = std::stoi(argv[++i]);
    else if (arg == "--accumulate")
      o.accumulate = true;
    else if (arg == "--streamed")
      o.streamed = true;
    else if (arg == "--shape" && i + 1 < argc) {
      const std::string shape = argv[++i];
      const size_t x = shape.find('x');
      shapes.emplace_back(std::stoll(shape.substr(0, x)), std::stoll(shape.substr(x + 1)));
    } else {
      std::fprintf(stderr,
                   "usage: bench_matmul [--rows M ...] [--shape KxN ...] [--accumulate] [--streamed] [--threads T] "
                   "[--repeats R]\n");
      return 2;
    }
  }
  if (rows.empty()) rows = {16, 64};
  torch::set_num_threads(o.threads);
  torch::manual_seed(0);
  // {K, N}: the q/k/v, o, gate/up and down projections of configs/bench_memory.yaml, Qwen2.5-0.5B, SmolLM2-135M and
  // Qwen3-0.6B.
  if (shapes.empty())
    shapes = {{256, 512}, {256, 256}, {256, 1376}, {688, 256},  {896, 1152},  {896, 896},   {896, 9728},  {4864, 896},
              {576, 960}, {576, 576}, {576, 3072}, {1536, 576}, {1024, 4096}, {2048, 1024}, {1024, 6144}, {3072, 1024}};
  std::printf("{\"dnnl_kernel\":\"%s\"}\n", ppo::dnnl_kernel().c_str());
  for (const int64_t M : rows)
    for (const auto& [K, N] : shapes) {
      bench_shape(M, K, N, o);
    }
  return 0;
}
