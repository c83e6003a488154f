// Rewards: built-in reward functions chosen by a record's data_source or by reward.function, or an external reward
// program (reward.command, tasks/reward_program.h) for rewards in any language.
//
// Built-in functions (name: rule, source):
//   exact_match  1 when the response, stripped of surrounding whitespace, equals the ground truth string, else 0
//                (TRL's and veRL's simplest rule-based reward)
//   gsm8k        the last "#### N" answer equals the ground truth as numbers (veRL's gsm8k.py extraction;
//                tasks/math_answer.h)
//   math         the last \boxed{...} answer (else the "#### N" one) equals the ground truth (Hendrycks MATH's
//                last_boxed_only_string, as veRL's math reward; numeric normalisation)
//   kk           Logic-RL's Knights-and-Knaves reward (tasks/kk.h), -3..3
//   reverse, digit_sum   the toy tasks' partial-credit rewards (tasks/task.h)
// data_source -> function: the names above, and veRL's data sources "openai/gsm8k" (gsm8k), "lighteval/MATH",
// "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500" (math), Logic-RL's "kk_logic" (kk).
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "tasks/task.h"

namespace ppo {

class RewardProgram;

// One response to score: its sample, the prompt text the policy continued (after any chat template), the response.
struct RewardRequest {
  const TaskSample* sample = nullptr;
  std::string prompt;
  std::string response;
};

using RewardFunction = std::function<Score(const RewardRequest&)>;

std::vector<std::string> reward_function_names();  // sorted
// UsageError "reward.function: unknown reward 'x'; valid: ...".
RewardFunction make_reward_function(const std::string& name);
// The built-in function a data_source selects, or "" when none does.
std::string reward_function_for(const std::string& data_source);

// Scores responses by reward.command when set, else by reward.function when set, else by each sample's
// data_source (a sample without one uses `default_source`, the task's name).
class Rewarder {
 public:
  // The external program, if any, starts here (once per rank; PPO_RANK and PPO_WORLD_SIZE in its environment).
  Rewarder(const RewardConfig& config, std::string default_source, int64_t rank = 0, int64_t world_size = 1);
  ~Rewarder();
  Rewarder(const Rewarder&) = delete;
  Rewarder& operator=(const Rewarder&) = delete;

  // UsageError, naming the record's file and line, for a sample whose data_source has no built-in reward while
  // neither reward.function nor reward.command is set. Call at start-up on every data set.
  void check(const std::vector<TaskSample>& samples) const;
  // One Score per request, in order. An external program's failure is a UsageError naming the command and the
  // response's index.
  std::vector<Score> score(const std::vector<RewardRequest>& requests);
  // The data_source metrics are named by: the sample's, or default_source.
  std::string source_of(const TaskSample& sample) const;

 private:
  RewardConfig config_;
  std::string default_source_;
  std::unique_ptr<RewardProgram> program_;
  std::map<std::string, RewardFunction> functions_;  // by name, made on first use
};

}  // namespace ppo
