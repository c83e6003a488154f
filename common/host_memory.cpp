#include "common/host_memory.h"

#include <malloc.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <string>

namespace ppo {

double available_memory_bytes() {
  double available = -1;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    double kib = 0;
    meminfo >> kib;
    if (key == "MemAvailable:") available = kib * 1024;
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  std::ifstream max_file("/sys/fs/cgroup/memory.max"), current_file("/sys/fs/cgroup/memory.current");
  double limit = 0, current = 0;
  if (max_file >> limit && current_file >> current && limit > current)  // "max" (no limit) does not read
    available = available < 0 ? limit - current : std::min(available, limit - current);
  return available;
}

void release_free_heap() {
  malloc_trim(0);
}

}  // namespace ppo
