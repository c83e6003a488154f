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
//
// Setting the variable from here instead does not work: glibc's own initialiser, which runs after this one, resets
// the environment to the one the kernel passed, so libgomp never sees it.
//
// It re-executes only this program, with the same arguments and environment and in the same process (the same pid,
// so mpirun, srun and a job's PMI see nothing change; LD_PRELOAD-ed profilers and sanitizer runtimes load again into
// the new image). It does not re-execute where that would change what runs:
// - started through the dynamic loader (`/lib64/ld-linux-x86-64.so.2 build/ppo config`): /proc/self/exe is the
//   loader, which would take the first argument for the program to run;
// - under Valgrind (its preloaded vgpreload_*.so): Valgrind does not follow an exec unless --trace-children=yes, so
//   the re-executed program would run natively, out of the tool's sight.
// There libgomp keeps its default; setting GOMP_SPINCOUNT (or OMP_WAIT_POLICY) in the environment is the same
// setting by hand, and always wins.
#include <elf.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace {

// Whether the file /proc/self/exe names is a dynamically linked program (it has an interpreter, PT_INTERP), as this
// program is. The dynamic loader itself has none.
bool exe_is_a_program() {
  const int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  Elf64_Ehdr header;
  bool interpreted = false;
  if (pread(fd, &header, sizeof header, 0) == static_cast<ssize_t>(sizeof header) &&
      std::memcmp(header.e_ident, ELFMAG, SELFMAG) == 0 && header.e_ident[EI_CLASS] == ELFCLASS64 &&
      header.e_phentsize == sizeof(Elf64_Phdr)) {
    for (int i = 0; i < header.e_phnum && !interpreted; ++i) {
      Elf64_Phdr segment;
      const off_t at = static_cast<off_t>(header.e_phoff + static_cast<uint64_t>(i) * sizeof segment);
      if (pread(fd, &segment, sizeof segment, at) != static_cast<ssize_t>(sizeof segment)) break;
      interpreted = segment.p_type == PT_INTERP;
    }
  }
  close(fd);
  return interpreted;
}

void wait_briefly(int /*argc*/, char** argv, char** envp) {
  static char setting[] = "GOMP_SPINCOUNT=1000";
  size_t count = 0;
  for (char** e = envp; *e; ++e, ++count) {
    if (std::strncmp(*e, "GOMP_SPINCOUNT=", 15) == 0 || std::strncmp(*e, "OMP_WAIT_POLICY=", 16) == 0) return;
    if (std::strncmp(*e, "LD_PRELOAD=", 11) == 0 && std::strstr(*e, "vgpreload")) return;  // under Valgrind
  }
  if (!exe_is_a_program()) return;  // started through the dynamic loader: /proc/self/exe is not this program
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
