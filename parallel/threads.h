// How many LibTorch intra-op threads a rank runs (trainer.num_threads).
#pragma once

#include <cstdint>

namespace ppo {

// The cores this process may run on (sched_getaffinity: mpirun binds small jobs' ranks to one core each, and
// taskset or a container's cpuset limit them too).
int64_t usable_cores();
// trainer.num_threads=0: the usable cores, but no more than the machine's share of each rank on this host.
int64_t default_threads(int64_t usable, int64_t machine, int64_t local_ranks);
// OMP_NUM_THREADS as trainer.num_threads=0 takes it before default_threads (PyTorch's default thread count does the
// same, and torchrun sets it to 1): the first entry of `value` ("4" or "4,2") when it is a count of 1..`machine`;
// 0 when `value` is null or empty, -1 when it is not such a count.
int64_t omp_num_threads(const char* value, int64_t machine);
// The threads of a rank given trainer.num_threads=`requested`, one of `local_ranks` on this host: `requested`, or
// for 0 OMP_NUM_THREADS when it is set (with `warn`, a warning line when it is not a thread count), else
// default_threads. UsageError when `requested` is more than the machine's cores.
int64_t rank_threads(int64_t requested, int64_t local_ranks, bool warn);

}  // namespace ppo
