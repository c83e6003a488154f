// The processes of a job, found by their command line, for the tests that stop or kill one rank.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "tests/text_file.h"

namespace ppo_test {

// The processes whose command line contains `marker` (mpirun and its ranks), and of those only rank `rank` when
// rank >= 0 (OMPI_COMM_WORLD_RANK in its environment). Found in /proc, where processes come and go while it is read.
inline std::vector<pid_t> processes_with(const std::string& marker, int rank = -1) {
  const std::string rank_variable = std::string(1, '\0') + "OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0';
  std::vector<pid_t> pids;
  std::error_code error;
  for (std::filesystem::directory_iterator it("/proc", error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (ppo_test::read_text(it->path() / "cmdline").find(marker) == std::string::npos) continue;
    if (rank >= 0 && ('\0' + ppo_test::read_text(it->path() / "environ")).find(rank_variable) == std::string::npos)
      continue;
    pids.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return pids;
}

}  // namespace ppo_test
