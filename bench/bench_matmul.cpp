// The packed float32 product of the decode step (decode/packed_gemm.h) against LibTorch's matmul (at::mm, OpenBLAS's
// sgemm on Debian's build, MKL's on PyPI's: what PyTorch eager runs) and against the libraries' own pack-once
// products, on the projections of the benchmark models, side by side in one run: the weight packed once against the
// same weight given to mm as the contiguous [K, N] operand (the faster of its two layouts) and as the transpose of the
// [N, K] weight (nn.Linear's); where the build has them, oneDNN's matmul primitive with the weight reordered once into
// the layout it chooses (Debian's libdnnl, PPO_BENCH_DNNL) and MKL's packed sgemm with the weight packed once
// (cblas_sgemm_pack and cblas_sgemm_compute, exported by PyPI's LibTorch, PPO_BENCH_MKL_PACK).
//
//   bench_matmul [--rows M ...] [--threads T] [--repeats R]
//
// Prints one JSON line per shape: M, K, N, microseconds per product of each (the best of R rounds of 100; -1 where
// the build lacks it) and GFLOP/s, and the largest difference of the packed, oneDNN and MKL products from mm's.
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "decode/packed_gemm.h"

#if PPO_BENCH_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

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

#if PPO_BENCH_DNNL
// out = a w by oneDNN's matmul primitive, the [K, N] weight reordered once into the layout the primitive asks for.
struct DnnlMatmul {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::matmul primitive;
  dnnl::memory weights, src, dst;

  DnnlMatmul(const torch::Tensor& a, const torch::Tensor& operand, const torch::Tensor& out) {
    using tag = dnnl::memory::format_tag;
    const auto f32 = dnnl::memory::data_type::f32;
    const int64_t M = a.size(0), K = a.size(1), N = operand.size(1);
    const dnnl::memory::desc src_md({M, K}, f32, tag::ab), dst_md({M, N}, f32, tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, {{K, N}, f32, tag::any}, dst_md), engine);
    dnnl::memory given({{K, N}, f32, tag::ab}, engine, operand.data_ptr<float>());
    weights = dnnl::memory(pd.weights_desc(), engine);
    dnnl::reorder(given, weights).execute(stream, given, weights);
    stream.wait();
    primitive = dnnl::matmul(pd);
    src = dnnl::memory(src_md, engine, a.data_ptr<float>());
    dst = dnnl::memory(dst_md, engine, out.data_ptr<float>());
  }
  void operator()() {
    primitive.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    stream.wait();
  }
};
#endif

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
  // {K, N}: configs/bench_memory.yaml's q/k/v, o, gate/up and down; Qwen2.5-0.5B's q/k/v, o, gate/up and down.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{256, 512},  {256, 256}, {256, 1376}, {688, 256},
                                                           {896, 1152}, {896, 896}, {896, 9728}, {4864, 896}};
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
      at::mm_out(reference, a, operand);
      const double diff = (out - reference).abs().max().item<double>();
      double dnnl_us = -1, dnnl_diff = -1, mkl_us = -1, mkl_diff = -1;
      auto other = torch::zeros({M, N});
#if PPO_BENCH_DNNL
      DnnlMatmul dnnl(a, operand, other);
      dnnl_us = best_us(dnnl, repeats);
      dnnl_diff = (other - reference).abs().max().item<double>();
#endif
#if PPO_BENCH_MKL_PACK
      MklPacked mkl(M, operand);
      mkl_us = best_us([&] { mkl(a, other); }, repeats);
      mkl_diff = (other - reference).abs().max().item<double>();
#endif
      const double flop = 2.0 * static_cast<double>(M * K * N);
      std::printf(
          "{\"rows\":%lld,\"k\":%lld,\"n\":%lld,\"threads\":%d,\"packed_us\":%.1f,\"mm_us\":%.1f,"
          "\"mm_transposed_us\":%.1f,\"dnnl_us\":%.1f,\"mkl_packed_us\":%.1f,\"packed_gflops\":%.1f,"
          "\"mm_gflops\":%.1f,\"max_diff\":%.3g,\"dnnl_max_diff\":%.3g,\"mkl_max_diff\":%.3g}\n",
          static_cast<long long>(M), static_cast<long long>(K), static_cast<long long>(N), threads, packed_us, mm_us,
          mm_t_us, dnnl_us, mkl_us, flop / packed_us / 1e3, flop / mm_us / 1e3, diff, dnnl_diff, mkl_diff);
    }
  return 0;
}
