#include "tests/paths.h"

#include "test_paths_generated.h"

namespace ppo_test {

const Paths& paths() {
  static const Paths p{PPO_SOURCE_DIR, PPO_BINARY, PPO_MPIEXEC, PPO_REF_PYTHON, PPO_REF_DIR};
  return p;
}

}  // namespace ppo_test
