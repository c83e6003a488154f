// The host memory this process may still allocate (a probe of /proc/meminfo and the cgroup's limit), and handing
// the heap's free pages back.
#pragma once

namespace ppo {

// The memory this process may still allocate: MemAvailable, or less under a cgroup (v2) limit; -1 when unknown.
double available_memory_bytes();

// Hands the heap's free pages back to the system (glibc's malloc_trim). app/main.cpp keeps freed memory in the heap
// for reuse (no trimming below 1 GiB), which the steps want; after the start-up (models built a unit at a time,
// weights read, the check across ranks) what it freed would otherwise stay resident for the whole run.
void release_free_heap();

}  // namespace ppo
