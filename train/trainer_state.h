// trainer_state.json, the counters a checkpoint resumes from, read with every field checked: a checkpoint written by
// hand, cut short or damaged stops the run with one error naming the file and the key, never a wrong resume.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace ppo {

struct TrainerState {
  int64_t global_step = 0;             // steps completed
  double kl_coef = 0.0;                // the adaptive KL controller's coefficient
  int64_t actor_optimizer_steps = 0;   // optimizer steps taken (the learning-rate schedule's position)
  int64_t critic_optimizer_steps = 0;  //
  int64_t data_seed = 0;               // data.seed of the run that wrote it
  int64_t gen_batches = 0;             // generation batches taken (the sampler's position; more than global_step
                                       // under algorithm.filter_groups). Absent in older files: global_step
  int64_t sampler_epoch = 0;           // gen_batches / steps per epoch
};

nlohmann::json trainer_state_json(const TrainerState& state);

// Parses `text` (the contents of `file`). Every key but gen_batches must be present with its type: whole numbers for
// the counters, in [0, 2^53) (exact as JSON numbers), a finite kl_coef >= 0. Anything else is a UsageError naming
// `file` and the key.
TrainerState parse_trainer_state(const std::string& text, const std::string& file);

// Reads and parses `file`.
TrainerState read_trainer_state(const std::string& file);

}  // namespace ppo
