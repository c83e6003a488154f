// The host memory this process may still allocate (a probe of /proc/meminfo and the cgroup's limit).
#pragma once

namespace ppo {

// The memory this process may still allocate: MemAvailable, or less under a cgroup (v2) limit; -1 when unknown.
double available_memory_bytes();

}  // namespace ppo
