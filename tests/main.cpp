// Catch2 main. `--skip-without-cuda` (first argument) exits 77, ctest's "skipped", when no CUDA device exists.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstring>

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--skip-without-cuda") == 0) {
    if (!torch::cuda::is_available()) {
      std::printf("skipped: no CUDA device\n");
      return 77;
    }
    argv[1] = argv[0];
    return Catch::Session().run(argc - 1, argv + 1);
  }
  return Catch::Session().run(argc, argv);
}
