#include "common/blas_kernels.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cctype>

namespace ppo {

std::string openblas_core() {
  using CoreName = char* (*)();
  // Looked up at run time: LibTorch loads OpenBLAS (through libblas.so.3) or not, and ppo.cpp does not link it.
  const auto corename = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (corename == nullptr) return "";
  const char* name = corename();
  return name == nullptr ? "" : name;
}

std::string openblas_kernels_for_cpu() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return "";
}

std::string blas_kernels_warning(const std::string& core, const std::string& cpu_kernels) {
  // OpenBLAS's x86-64 cores (as libopenblas.so.0 names them) whose kernels stop short of AVX2.
  static const std::array<const char*, 18> before_avx2 = {
      "unknown", "katmai",      "banias",  "prescott",     "atom",       "core2",
      "penryn",  "dunnington",  "nehalem", "opteron_sse3", "opteron",    "barcelona",
      "nano",    "sandybridge", "bobcat",  "bulldozer",    "piledriver", "steamroller"};
  std::string lower = core;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  const bool old = std::find(before_avx2.begin(), before_avx2.end(), lower) != before_avx2.end();
  if (core.empty() || !old || cpu_kernels.empty()) return "";
  return "warning: OpenBLAS runs its " + core + " kernels, which predate AVX2, on a CPU that runs its " + cpu_kernels +
         " ones: matrix products can take up to twice as long (docs/building.md); set OPENBLAS_CORETYPE=" +
         cpu_kernels + " to choose them";
}

std::string blas_kernels_warning() {
  return blas_kernels_warning(openblas_core(), openblas_kernels_for_cpu());
}

}  // namespace ppo
