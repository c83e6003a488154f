// The PPO step loop: one call per phase, each timed (verl's named phase timers): generate -> reward -> old
// log-probs -> ref -> values -> advantages -> critic update -> actor update -> metrics, validation, checkpoint.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "actor/actor.h"
#include "common/config.h"
#include "critic/critic.h"
#include "model/tokenizer.h"
#include "parallel/context.h"
#include "rl/algorithms.h"
#include "rl/kl_controller.h"
#include "rl/metrics.h"
#include "tasks/task.h"
#include "train/evaluate.h"
#include "train/prompts.h"
#include "train/run_dir.h"
#include "train/schedule.h"
#include "train/trainer_state.h"

namespace ppo {

class Trainer {
 public:
  // Builds everything (config already validated), resumes from the run directory per trainer.resume_mode.
  Trainer(Config& config, Context& context);
  // Runs the remaining steps of the schedule: the step's phases, validation, logging and checkpoints.
  void fit();
  int64_t total_steps() const { return schedule_.total_steps(); }

 private:
  std::map<std::string, double> train_step(int64_t step);  // step: the global step, 1-based
  // A generation batch's responses on this rank, scored (with the overlong punishment), and the value of each that
  // algorithm.filter_groups.metric names (undefined when that is off).
  struct Scored {
    Batch batch;
    torch::Tensor filter_values;  // [B]
  };
  // Generation batch `index` (0-based, the sampler's position: batch i takes the prompts that the sampler of the
  // step's curriculum stage gives its step i + 1, and its seeds mix in i); reward metrics accumulate in `m`.
  Scored generate_scored(int64_t step, int64_t index, Metrics& m);
  // DAPO dynamic sampling (algorithm.filter_groups): generation batches until data.train_batch_size prompt groups
  // have signal (groups_with_signal), gathered over all ranks and dispatched in equal chunks as one batch would be.
  Batch sample_with_signal(int64_t step, Metrics& m);
  // DAPO's soft overlong punishment (reward.overlong_buffer) added to the scores and token scores.
  void punish_overlong(Batch& batch, Metrics& metrics);
  // The gap between the rollout's log-probs and old_log_probs (metrics every step) and, when
  // algorithm.rollout_correction.rollout_is is on, the importance weights the policy loss takes (rollout_is_weights).
  void correct_rollout(Batch& batch, Metrics& metrics);
  void estimate_advantages(Batch& batch, Metrics& metrics);
  // The step's data metrics, memory, timing and counters, reduced over all ranks.
  std::map<std::string, double> finish_metrics(const Batch& batch, Metrics& metrics, int64_t step, double step_time);
  ValMetrics validate_policy(int64_t step);  // also kept as first_val_ / last_val_
  void save_checkpoint(int64_t step);
  void resume();
  // The checkpoint's state belongs to its folder (global_step_N holds step N) and to a run of this config
  // (changed_run_keys), unless trainer.resume_allow_config_change.
  void check_resume_state(const std::string& dir, const TrainerState& state);
  void log_step(int64_t step, std::map<std::string, double> metrics, double elapsed);
  // A step with a skipped optimizer step prints a warning; trainer.max_skipped_steps of them in a row end the run.
  void check_skipped_steps(int64_t step, const std::map<std::string, double>& metrics);
  // Start-up: every data source has a reward, an external reward program answers; prints what was skipped.
  void check_rewards();
  // The end of fit(): score curve summary, the first and last validations by difficulty, curves.svg (root only).
  void print_summary() const;

  Config& config_;
  Context& context_;
  RunDir run_dir_;
  std::unique_ptr<Task> task_;
  std::unique_ptr<Tokenizer> tokenizer_;
  int64_t skipped_train_ = 0, skipped_val_ = 0;  // prompts data.filter_overlong_prompts skipped
  std::vector<int64_t> train_file_sizes_;        // prompts of each data.curriculum.train_files file
  int64_t consecutive_skipped_ = 0;              // steps in a row with a skipped optimizer step
  std::vector<TaskSample> train_set_, val_set_;
  std::unique_ptr<Rewarder> rewarder_;
  std::vector<std::string> train_sources_;  // data sources of the training set (reward/<source>/... metrics)
  std::string val_source_;                  // the first data source of the validation set: the console's val acc
  StepSchedule schedule_;
  std::vector<CurriculumStage> stages_;  // data.curriculum's stages (one without it)
  AdvEstimator estimator_;               // algorithm.adv_estimator, parsed once
  KlEstimator kl_penalty_;               // algorithm.kl_penalty, parsed once
  RolloutIsLevel rollout_is_;            // algorithm.rollout_correction.rollout_is, parsed once
  std::unique_ptr<Actor> actor_, ref_;
  std::unique_ptr<Critic> critic_;
  KlController kl_ctrl_;
  int64_t start_step_ = 0;
  int64_t gen_batches_ = 0;  // generation batches taken so far: one per step, or more under filter_groups
  std::vector<double> score_curve_;
  // The first and the latest validation this process ran, with their steps (-1: none).
  ValMetrics first_val_, last_val_;
  int64_t first_val_step_ = -1, last_val_step_ = -1;
};

// ppo train: validates the config for the world size, then trains. Returns the exit status.
int run_train(Config& config);

}  // namespace ppo
