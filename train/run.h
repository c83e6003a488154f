// A run of `ppo train`, `ppo sft` or `ppo rm`: one setup and one loop for all, the subcommand plugging in its step
// (RunSteps: PPO's in train/trainer.h, SFT's in train/sft.h, the reward model's in train/rm.h). A second hand-written
// loop drifts: SFT's lost resume and the skipped-step stop that way. `ppo eval` and `ppo generate` use the setup's
// inputs alone (load_run_inputs).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "parallel/context.h"
#include "records/run_dir.h"
#include "records/trainer_state.h"
#include "tasks/reward.h"
#include "tasks/task.h"
#include "text/tokenizer.h"
#include "train/config_check.h"
#include "train/evaluate.h"
#include "train/multi_turn.h"
#include "train/prompts.h"
#include "train/schedule.h"

namespace ppo {

// What every subcommand that generates from prompts starts from: the task, the tokenizer, the prompts (the training
// ones for train and sft only) and the rewarder, checked against every data source (a source without a reward stops
// here, before any model loads). `ppo rm` starts from the tokenizer and its preference pairs alone.
struct RunInputs {
  std::unique_ptr<Task> task;
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<TaskSample> train_set, val_set;
  int64_t skipped_train = 0, skipped_val = 0;  // prompts data.filter_overlong_prompts skipped
  std::vector<int64_t> train_file_sizes;       // prompts of each data.curriculum.train_files file
  std::unique_ptr<Rewarder> rewarder;
  std::unique_ptr<ToolEnvironment> environment;  // rollout.multi_turn's environment program, when on
  std::string val_source;                        // the validation set's first data source: the console's val acc
  // ppo rm: the preference pairs instead of prompts (no task, no rewarder); val_source "pairs".
  std::vector<EncodedPair> train_pairs, val_pairs;
  // ppo train with distillation.enable: the config the teacher is built from (train/distillation.h), checked.
  std::unique_ptr<Config> teacher;
  RunShape shape;  // check_config's, for the job's ranks
};
// Checks the config for `mode` first (its shape: RunInputs::shape), then loads.
RunInputs load_run_inputs(const Config& config, Context& context, RunMode mode);

// What a training subcommand does at each point of the loop.
class RunSteps {
 public:
  virtual ~RunSteps() = default;
  // "ppo", "sft" or "rm": a checkpoint resumes only a run of its kind.
  virtual std::string kind() const = 0;
  // Step `step` (1-based): its metrics, reduced over the ranks. A key ending in /skipped_steps counts the optimizer
  // steps it skipped (a non-finite gradient norm).
  virtual std::map<std::string, double> step(int64_t step) = 0;
  // The policy on the validation prompts (ppo rm: the reward model on the validation pairs; none without them).
  virtual ValMetrics validate(int64_t step) = 0;
  // The console's report of a step's metrics, between "step i/N | " and the timing.
  virtual std::string progress(const std::map<std::string, double>& metrics) const = 0;
  // The console's line for validation before training: "acc A score S" of data source `source`'s metrics.
  virtual std::string val_report(const ValMetrics& val, const std::string& source) const;
  // Writes the models and optimizer states into the checkpoint folder `dir`, and its counters into `state`.
  virtual void save(const std::string& dir, TrainerState& state) = 0;
  // Reads them back from a checkpoint.
  virtual void load(const std::string& dir, const TrainerState& state) = 0;
  // The parameters are equal on every rank (at start-up, and every parallel.check_params_freq steps).
  virtual void check_identical(const std::string& when) = 0;
  // After the last step (root only).
  virtual void summarize() {}
};

// The RunSteps of a subcommand that trains one worker (SFT's actor, ppo rm's critic model): the worker's files and
// optimizer state in a checkpoint, its optimizer's step count (the learning-rate schedule's position) in the trainer
// state's field `optimizer_steps`, and the parameter check across ranks.
template <class Worker>
class WorkerSteps : public RunSteps {
 public:
  WorkerSteps(Context& context, int64_t TrainerState::*optimizer_steps)
      : context_(context), optimizer_steps_(optimizer_steps) {}
  void save(const std::string& dir, TrainerState& state) override {
    state.*optimizer_steps_ = worker_->optimizer().steps_taken();
    worker_->save(dir);
  }
  void load(const std::string& dir, const TrainerState& state) override {
    worker_->load(dir, /*with_optimizer=*/true);
    worker_->optimizer().set_steps_taken(state.*optimizer_steps_);
  }
  void check_identical(const std::string& when) override { worker_->state().check_identical(context_, when); }

 protected:
  std::unique_ptr<Worker> worker_;

 private:
  Context& context_;
  int64_t TrainerState::*optimizer_steps_;
};

class Run {
 public:
  // The setup: the config checked for `mode`, the inputs, the run directory, the step schedule.
  Run(const Config& config, Context& context, RunMode mode);

  // The start-up counts from the end of this constructor (the models are built after it) to the first step:
  // memory/startup_peak_mib in the first step's metrics.
  // Resumes `steps` as trainer.resume_mode says (or moves an earlier run's files aside), writes config.yaml, then
  // runs the remaining steps: each step, validation every trainer.test_freq, logging (console, metrics.jsonl,
  // TensorBoard), checkpoints every trainer.save_freq, the parameter check across ranks, and the stop after
  // trainer.max_skipped_steps steps in a row that skipped an optimizer step.
  void fit(RunSteps& steps);

  const Config& config() const { return config_; }
  Context& context() { return context_; }
  RunInputs& inputs() { return inputs_; }
  const RunShape& shape() const { return inputs_.shape; }
  const StepSchedule& schedule() const { return schedule_; }
  const RunDir& run_dir() const { return run_dir_; }
  int64_t start_step() const { return start_step_; }

 private:
  void resume(RunSteps& steps);
  // The checkpoint's state belongs to its folder (global_step_N holds step N), to a run of this kind, and to a run
  // of this config (changed_run_keys), unless trainer.resume_allow_config_change.
  void check_resume_state(const std::string& dir, const TrainerState& state, const std::string& kind);
  void save_checkpoint(RunSteps& steps, int64_t step);
  void validate_before_training(RunSteps& steps);
  void log_step(RunSteps& steps, int64_t step, const std::map<std::string, double>& metrics, double elapsed);
  // A step with a skipped optimizer step prints a warning; trainer.max_skipped_steps of them in a row end the run.
  void check_skipped_steps(int64_t step, const std::map<std::string, double>& metrics);

  const Config& config_;
  Context& context_;
  RunInputs inputs_;
  RunDir run_dir_;
  StepSchedule schedule_;
  int64_t start_step_ = 0;
  int64_t consecutive_skipped_ = 0;  // steps in a row with a skipped optimizer step
  double startup_peak_mib_ = 0;      // the most the ranks' device held from the setup to the first step
};

// A subcommand's whole run: the Run for `mode`, its step `Steps` (PpoSteps, SftSteps) built on it, the loop.
// Returns the exit status.
template <class Steps>
int fit_run(const Config& config, RunMode mode) {
  Run run(config, Context::get(), mode);
  Steps steps(run);
  run.fit(steps);
  return 0;
}

}  // namespace ppo
