// libFuzzer target for the checkpoint's trainer_state.json reader (records/trainer_state.cpp): any input must either
// parse or throw ppo::UsageError, and a parsed state written back by trainer_state_json must parse to the same
// values. Any other exception, crash, sanitizer report or failed check is a bug. Built and run by scripts/fuzz.sh
// (`bash scripts/fuzz.sh build 30 trainer_state`).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "records/trainer_state.h"

namespace {

bool same(const ppo::TrainerState& a, const ppo::TrainerState& b) {
  return a.global_step == b.global_step && a.kl_coef == b.kl_coef &&
         a.actor_optimizer_steps == b.actor_optimizer_steps && a.critic_optimizer_steps == b.critic_optimizer_steps &&
         a.data_seed == b.data_seed && a.sampler_epoch == b.sampler_epoch && a.gen_batches == b.gen_batches &&
         a.config == b.config;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ppo::TrainerState state;
  try {
    state = ppo::parse_trainer_state(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const ppo::UsageError&) {
    return 0;
  }
  const std::string written = ppo::trainer_state_json(state).dump(2);
  const ppo::TrainerState again = ppo::parse_trainer_state(written, "written");  // no catch: it must parse
  if (!same(state, again)) {
    std::fprintf(stderr, "fuzz_trainer_state: written back as %s, which parses to other values\n", written.c_str());
    std::abort();
  }
  return 0;
}
