// The PPO step: one call per phase, each timed (verl's named phase timers): generate -> reward -> old log-probs ->
// ref -> values -> advantages -> critic update -> actor update -> metrics.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "parallel/context.h"
#include "records/run_dir.h"
#include "rl/algorithms.h"
#include "rl/distillation.h"
#include "rl/kl_controller.h"
#include "rl/metrics.h"
#include "tasks/task.h"
#include "text/tokenizer.h"
#include "train/evaluate.h"
#include "train/prompts.h"
#include "train/roles.h"
#include "train/run.h"
#include "train/schedule.h"
#include "train/step_generator.h"
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
  // This rank's rows of step `step`'s batch: generated here (colocated), or as the rollout ranks deliver it.
  Batch step_batch(int64_t step, Metrics& m);
  // Trainer ranks, after the update: the weights to the rollout ranks (timing_s/weight_sync), and with
  // async.max_staleness=1 the next step's batch, generated meanwhile (timing_s/wait_rollout).
  void exchange_with_rollout(int64_t step, Metrics& m);
  // Trainer ranks, once before the first step or validation: where the run stands, and the weights.
  void start_roles();
  // The gap between the rollout's log-probs and old_log_probs (metrics every step) and, when
  // algorithm.rollout_correction.rollout_is is on, the importance weights the policy loss takes (rollout_is_weights).
  void correct_rollout(Batch& batch, Metrics& metrics);
  void estimate_advantages(Batch& batch, Metrics& metrics);
  // distillation.enable: the teacher's log-probs of the responses (teacher_log_probs; timing_s/teacher) and the
  // distill/* metrics, given the student's most likely tokens (`student_argmax`, from the old log-probs' forward).
  void teach(Batch& batch, const torch::Tensor& student_argmax, Metrics& metrics);
  // The step's token rewards: the task's scores, or with distillation's reverse_kl_reward the teacher's signal
  // (with the scores when distillation.use_policy_loss).
  torch::Tensor step_rewards(const Batch& batch) const;
  // The step needs the reference's log-probs (actor.use_kl_loss, algorithm.use_kl_in_reward).
  bool needs_reference() const { return config_.actor.use_kl_loss || config_.algorithm.use_kl_in_reward; }
  // The step's data metrics, memory, timing and counters, reduced over all ranks.
  std::map<std::string, double> finish_metrics(const Batch& batch, Metrics& metrics, int64_t step, double step_time);

  Run& run_;
  const Config& config_;
  Context& context_;
  RunInputs& in_;
  StepGenerator generator_;            // the generation side: used here when colocated; its schedule and counter always
  const AdvEstimatorSpec& estimator_;  // algorithm.adv_estimator, looked up once
  KlEstimator kl_penalty_;             // algorithm.kl_penalty, parsed once
  RolloutIsLevel rollout_is_;          // algorithm.rollout_correction.rollout_is, parsed once
  std::unique_ptr<Actor> actor_, ref_;
  std::unique_ptr<Actor> teacher_;      // distillation.enable, on the ranks that train
  std::optional<DistillSpec> distill_;  // distillation.loss_mode, parsed once, when enabled
  std::unique_ptr<Critic> critic_;
  KlController kl_ctrl_;
  // Trainer ranks: the batch delivered ahead of its step (async.max_staleness=1), and its rollout metrics when taken.
  std::optional<Delivery> in_flight_;
  std::map<std::string, double> rollout_metrics_;
  bool roles_started_ = false;
  std::vector<double> score_curve_;
  // The first and the latest validation this process ran, with their steps (-1: none).
  ValMetrics first_val_, last_val_;
  int64_t first_val_step_ = -1, last_val_step_ = -1;
};

// ppo train: checks the config for the world size, then trains. Returns the exit status.
int run_train(const Config& config);

}  // namespace ppo
