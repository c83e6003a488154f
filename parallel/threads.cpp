// See parallel/threads.h.
#include "parallel/threads.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/error.h"

namespace ppo {

int64_t usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max<int64_t>(1, std::thread::hardware_concurrency());
}

int64_t default_threads(int64_t usable, int64_t machine, int64_t local_ranks) {
  return std::max<int64_t>(1, std::min(usable, machine / std::max<int64_t>(1, local_ranks)));
}

int64_t omp_num_threads(const char* value, int64_t machine) {
  if (value == nullptr || *value == '\0') return 0;
  const std::string text(value);
  const std::string first = text.substr(0, text.find(','));
  if (first.empty() || first.size() > 9 || first.find_first_not_of("0123456789") != std::string::npos) return -1;
  const int64_t count = std::stoll(first);
  return count >= 1 && count <= machine ? count : -1;
}

int64_t rank_threads(int64_t requested, int64_t local_ranks, bool warn) {
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  usage_check(requested <= cores, "trainer.num_threads=" + std::to_string(requested) + " is more than the " +
                                      std::to_string(cores) + " cores of this machine; use 1.." +
                                      std::to_string(cores) + ", or 0 (the cores / the ranks on this host)");
  if (requested > 0) return requested;
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const int64_t from_env = omp_num_threads(omp, cores);
  if (from_env > 0) return from_env;
  if (from_env < 0 && warn)
    std::fprintf(stderr,
                 "warning: OMP_NUM_THREADS=%s is not a thread count of 1..%lld: trainer.num_threads=0 ignores it\n",
                 omp, static_cast<long long>(cores));
  return default_threads(usable_cores(), cores, local_ranks);
}

}  // namespace ppo
