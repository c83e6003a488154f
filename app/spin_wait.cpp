// How long idle OpenMP threads spin before they sleep. LibTorch's intra-op threads, and OpenBLAS's or MKL's, are
// GNU OpenMP (libgomp) threads, which by default spin for GOMP_SPINCOUNT = 300,000 iterations (milliseconds) at every
// barrier before they yield. On cores shared with another busy process they burn the time slices that the thread
// they wait for needs: on the 2-core machine a PPO step of configs/bench_memory.yaml took 1.8 s alone and 6.8 s beside
// one `yes > /dev/null`, and 3.9 s with GOMP_SPINCOUNT=1000, which costs nothing measurable alone (BENCHMARKS.md,
// "A shared CPU").
//
// libgomp reads its settings once, while the shared libraries initialise, before main() and before anything main()
// could set. So the executable re-executes itself with GOMP_SPINCOUNT=1000 unless the environment already says how
// to wait (GOMP_SPINCOUNT or OMP_WAIT_POLICY: a user's setting wins). It runs from .preinit_array, which the dynamic
// loader calls before any library's initialiser: LibTorch's static initialisers run once, in the new image. Linked
// into `ppo` and the benchmark programs (the tests set the variable in their environment instead).
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace {

void wait_briefly(int /*argc*/, char** argv, char** envp) {
  static char setting[] = "GOMP_SPINCOUNT=1000";
  size_t count = 0;
  for (char** e = envp; *e; ++e, ++count)
    if (std::strncmp(*e, "GOMP_SPINCOUNT=", 15) == 0 || std::strncmp(*e, "OMP_WAIT_POLICY=", 16) == 0) return;
  char** env = static_cast<char**>(std::malloc((count + 2) * sizeof(char*)));
  if (env == nullptr) return;
  std::memcpy(env, envp, count * sizeof(char*));
  env[count] = setting;
  env[count + 1] = nullptr;
  execve("/proc/self/exe", argv, env);  // returns only on failure: then run on with libgomp's default
  std::free(env);
}

__attribute__((section(".preinit_array"), used)) void (*const spin_wait_setting)(int, char**, char**) = wait_briefly;

}  // namespace
