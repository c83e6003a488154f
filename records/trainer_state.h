// trainer_state.json, the counters a checkpoint resumes from, read with every field checked: a checkpoint written by
// hand, cut short or damaged stops the run with one error naming the file and the key, never a wrong resume.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/running_moments.h"

namespace ppo {

struct TrainerState {
  std::string kind = "ppo";            // the run that wrote it: ppo (`ppo train`) | sft (`ppo sft`) | rm (`ppo rm`)
  int64_t global_step = 0;             // steps completed
  double kl_coef = 0.0;                // the adaptive KL controller's coefficient
  int64_t actor_optimizer_steps = 0;   // optimizer steps taken (the learning-rate schedule's position)
  int64_t critic_optimizer_steps = 0;  //
  int64_t data_seed = 0;               // data.seed of the run that wrote it
  int64_t gen_batches = 0;             // generation batches taken (the sampler's position; more than global_step
                                       // under algorithm.filter_groups). Absent in older files: global_step
  int64_t sampler_epoch = 0;           // gen_batches / steps per epoch
  RunningMoments reward_moments;       // reward_model.normalize's statistics. Absent in older files: none yet
  // The resolved config of the run that wrote it, every key with its value as YAML text (config_record). Absent in
  // files written before it was recorded: empty, and nothing is compared.
  std::map<std::string, std::string> config;
};

// Every key of `config` with its value as YAML text.
std::map<std::string, std::string> config_record(const Config& config);

// The keys whose value in `config` differs from `recorded` among those that change a run's numbers (batch sizes,
// rollout.n, seeds, the model's shape, the algorithm, the data, the reward), each as "key is <here> here, <recorded>
// in the checkpoint". Keys that only say how a run is carried out may differ: its length, where and how often it
// logs, validates and saves, memory and micro-batch settings (which change no number), timeouts, threads, and where
// the model and initial checkpoints are read from (a resumed run reads its weights from the checkpoint): the keys
// whose schema row (common/config.h) says `free`.
std::vector<std::string> changed_run_keys(const std::map<std::string, std::string>& recorded, const Config& config);

nlohmann::json trainer_state_json(const TrainerState& state);

// reward_model.normalize's statistics as JSON {"count", "mean", "var"}, and back: a UsageError naming `file` unless
// the count is a whole number in [0, 2^53), the mean finite and the variance finite and >= 0.
nlohmann::json reward_moments_json(const RunningMoments& moments);
RunningMoments parse_reward_moments(const nlohmann::json& moments, const std::string& file);

// Parses `text` (the contents of `file`). Every key but kind, gen_batches, reward_moments and config must be present
// with its type: whole numbers for the counters, in [0, 2^53) (exact as JSON numbers), a finite kl_coef >= 0, kind ppo,
// sft or rm (absent: ppo), reward_moments an object of a count, a finite mean and a finite var >= 0, config an object
// of strings. Anything else is a UsageError naming `file` and the key.
TrainerState parse_trainer_state(const std::string& text, const std::string& file);

// Reads and parses `file`.
TrainerState read_trainer_state(const std::string& file);

}  // namespace ppo
