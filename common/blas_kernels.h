// Which CPU kernels the BLAS runs. Debian's LibTorch 1.13 multiplies through OpenBLAS (0.3.21), which picks its kernels
// by the CPU's model number and falls back to Prescott's SSE3 kernels on a model it does not know (a 2-core Sapphire
// Rapids virtual CPU here: training took 1.5-2x as long, docs/building.md). PyPI's LibTorch uses MKL: no OpenBLAS.
#pragma once

#include <string>

namespace ppo {

// OpenBLAS's name for the kernels it runs ("Prescott", "Haswell", "SkylakeX", "Zen", ...: openblas_get_corename), or
// "" when this process has no OpenBLAS.
std::string openblas_core();

// The newest of OpenBLAS's x86-64 kernels that this CPU runs, of the two worth naming: "SkylakeX" (AVX-512 F, BW, DQ
// and VL), "Haswell" (AVX2 and FMA), else "".
std::string openblas_kernels_for_cpu();

// One warning line when OpenBLAS's kernels `core` predate AVX2 and the CPU runs `cpu_kernels`
// (openblas_kernels_for_cpu), naming the OPENBLAS_CORETYPE that selects them; "" otherwise.
std::string blas_kernels_warning(const std::string& core, const std::string& cpu_kernels);

// The same for this process and this CPU.
std::string blas_kernels_warning();

}  // namespace ppo
