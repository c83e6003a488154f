// The PPO step loop (and its SFT / eval / generate siblings). One call per phase, each timed.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

#include "actor/actor.h"
#include "common/config.h"
#include "critic/critic.h"
#include "model/tokenizer.h"
#include "parallel/context.h"
#include "rl/checkpoint.h"
#include "rl/data.h"
#include "rl/kl_controller.h"
#include "rl/metrics.h"
#include "tasks/task.h"

namespace ppo {

// Validation result: val/<task>/score/mean, val/<task>/acc/mean and val/<task>/acc/<difficulty>.
using ValMetrics = std::map<std::string, double>;

// Greedy (or val_temperature) generation over `samples`, scored by the task, reduced over all ranks.
ValMetrics evaluate(CausalLM& model, const std::vector<TaskSample>& samples, const Task& task,
                    const Tokenizer& tokenizer, const Config& config, Context& context);

class Trainer {
 public:
  Trainer(Config& config, Context& context);
  // Runs until trainer.total_training_steps (or total_epochs); returns the final metrics of the last step.
  void fit();
  int64_t total_steps() const { return total_steps_; }

 private:
  std::map<std::string, double> train_step(int64_t step);
  void compute_advantage(Batch& batch, Metrics& metrics);
  void add_data_metrics(const Batch& batch, Metrics& metrics) const;
  void save_checkpoint(int64_t step);
  void resume();
  void log_step(int64_t step, std::map<std::string, double> metrics, double elapsed);

  Config& config_;
  Context& context_;
  RunDir run_dir_;
  std::unique_ptr<Task> task_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<TaskSample> train_set_, val_set_;
  std::unique_ptr<Actor> actor_, ref_;
  std::unique_ptr<Critic> critic_;
  KlController kl_ctrl_;
  int64_t total_steps_ = 0;
  int64_t start_step_ = 0;
  std::vector<double> score_curve_;
};

int run_train(Config& config);
int run_sft(Config& config);
// Prints accuracy per difficulty of `checkpoint` (or actor.init_checkpoint) on the validation prompts.
int run_eval(Config& config, const std::string& checkpoint);
int run_generate(Config& config, int64_t count);

}  // namespace ppo
