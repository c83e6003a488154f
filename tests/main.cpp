// Catch2 main. A first argument `--skip-without-cuda` exits 77, ctest's "skipped", when no CUDA device exists;
// `--skip-without-mount` when this process cannot mount a tmpfs (it needs root, CAP_SYS_ADMIN). Otherwise the
// remaining arguments go to Catch2.
#define CATCH_CONFIG_RUNNER
#include <sys/mount.h>
#include <unistd.h>

#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

bool can_mount_tmpfs() {
  char dir[] = "/tmp/ppo_mount_probe_XXXXXX";
  if (::mkdtemp(dir) == nullptr) return false;
  const bool mounted = ::mount("tmpfs", dir, "tmpfs", 0, "size=65536") == 0;
  if (mounted) ::umount2(dir, MNT_DETACH);
  ::rmdir(dir);
  return mounted;
}

}  // namespace

int main(int argc, char** argv) {
  // The `ppo` processes the tests start inherit this, so they do not re-execute themselves to set it
  // (app/spin_wait.cpp); the test of that unsets it.
  setenv("GOMP_SPINCOUNT", "1000", /*overwrite=*/0);
  // And they run on one thread where their config leaves trainer.num_threads at 0, as does the reference scripts'
  // PyTorch (tests that run configs fixing two threads pass trainer.num_threads=1 or KK_THREADS=1 themselves): ctest
  // runs two tests at once on the development machine's two cores, and two threads beside another test took 1.4x the
  // time of one (README's default experiment).
  setenv("OMP_NUM_THREADS", "1", /*overwrite=*/0);
  // Runs in this process use one thread, as `ppo` does with the tests' trainer.num_threads=1: ctest runs two tests at
  // once on two cores. Left at LibTorch's default (one a core), PyPI's LibTorch 2.11 ran MKL's small matmuls and the
  // fused AdamW on two threads whose waits spin, and a test beside another one took up to 9x its time alone.
  torch::set_num_threads(1);
  const std::string first = argc > 1 ? argv[1] : "";
  if (first == "--skip-without-cuda" || first == "--skip-without-mount") {
    if (first == "--skip-without-cuda" && !torch::cuda::is_available()) {
      std::printf("skipped: no CUDA device\n");
      return 77;
    }
    if (first == "--skip-without-mount" && !can_mount_tmpfs()) {
      std::printf("skipped: this process cannot mount a tmpfs (it needs root, CAP_SYS_ADMIN)\n");
      return 77;
    }
    argv[1] = argv[0];
    return Catch::Session().run(argc - 1, argv + 1);
  }
  return Catch::Session().run(argc, argv);
}
