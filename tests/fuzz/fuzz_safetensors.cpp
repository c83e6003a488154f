// libFuzzer target for the safetensors header checks (model/safetensors.cpp): any input must either parse into a
// header whose entries lie inside the buffer, or throw ppo::UsageError. Any other exception, crash or sanitizer
// report is a bug. Build and run from the repository root (Debian LibTorch; for another LibTorch use
// -I$TORCH/include -I$TORCH/include/torch/csrc/api/include -L$TORCH/lib -Wl,-rpath,$TORCH/lib):
//   clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address -I. -I/usr/include/torch/csrc/api/include
//     tests/fuzz/fuzz_safetensors.cpp model/safetensors.cpp -ltorch -ltorch_cpu -lc10 -o build/fuzz_safetensors
//   (one command line)
//   mkdir -p build/fuzz_corpus && build/fuzz_safetensors -max_total_time=60 -rss_limit_mb=2048 build/fuzz_corpus
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "common/error.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ppo::SafetensorsHeader header = ppo::parse_safetensors_header(data, size, "fuzz");
    for (const ppo::SafetensorsEntry& e : header.entries)
      if (e.begin > e.end || header.data_start + e.end > size) std::abort();  // a check let a bad entry through
  } catch (const ppo::UsageError&) {
  }
  return 0;
}
