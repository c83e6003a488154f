// The PPO step: one call per phase, each timed (verl's named phase timers): generate -> reward -> old log-probs ->
// ref -> values -> advantages -> critic update -> actor update -> metrics.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/config.h"
#include "model/tokenizer.h"
#include "parallel/context.h"
#include "records/run_dir.h"
#include "rl/algorithms.h"
#include "rl/kl_controller.h"
#include "rl/metrics.h"
#include "tasks/task.h"
#include "train/evaluate.h"
#include "train/prompts.h"
#include "train/run.h"
#include "train/schedule.h"
#include "workers/actor.h"
#include "workers/critic.h"

namespace ppo {

// PPO's step, plugged into a Run (train/run.h), which owns the data, the schedule, the run directory and the loop.
class PpoSteps : public RunSteps {
 public:
  // Builds the actor, the reference and the critic the config needs, and the KL controller.
  explicit PpoSteps(Run& run);

  std::string kind() const override { return "ppo"; }
  std::map<std::string, double> step(int64_t step) override;  // step: the global step, 1-based
  ValMetrics validate(int64_t step) override;                 // also kept as first_val_ / last_val_
  std::string progress(const std::map<std::string, double>& metrics) const override;
  void save(const std::string& dir, TrainerState& state) override;
  void load(const std::string& dir, const TrainerState& state) override;
  void check_identical(const std::string& when) override;
  // The score curve's first and last fifth, the first and last validations by difficulty, curves.svg.
  void summarize() override;

 private:
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
  // The step needs the reference's log-probs (actor.use_kl_loss, algorithm.use_kl_in_reward).
  bool needs_reference() const { return config_.actor.use_kl_loss || config_.algorithm.use_kl_in_reward; }
  // The step's data metrics, memory, timing and counters, reduced over all ranks.
  std::map<std::string, double> finish_metrics(const Batch& batch, Metrics& metrics, int64_t step, double step_time);

  Run& run_;
  Config& config_;
  Context& context_;
  RunInputs& in_;
  std::vector<std::string> train_sources_;  // data sources of the training set (reward/<source>/... metrics)
  std::vector<CurriculumStage> stages_;     // data.curriculum's stages (one without it)
  const AdvEstimatorSpec& estimator_;       // algorithm.adv_estimator, looked up once
  KlEstimator kl_penalty_;                  // algorithm.kl_penalty, parsed once
  RolloutIsLevel rollout_is_;               // algorithm.rollout_correction.rollout_is, parsed once
  std::unique_ptr<Actor> actor_, ref_;
  std::unique_ptr<Critic> critic_;
  KlController kl_ctrl_;
  int64_t gen_batches_ = 0;  // generation batches taken so far: one per step, or more under filter_groups
  std::vector<double> score_curve_;
  // The first and the latest validation this process ran, with their steps (-1: none).
  ValMetrics first_val_, last_val_;
  int64_t first_val_step_ = -1, last_val_step_ = -1;
};

// ppo train: checks the config for the world size, then trains. Returns the exit status.
int run_train(Config& config);

}  // namespace ppo
