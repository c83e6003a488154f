// See tasks/reward.h.
#include "tasks/reward.h"

#include <map>

#include "common/error.h"
#include "common/strings.h"
#include "tasks/datasets.h"
#include "tasks/kk.h"
#include "tasks/math_answer.h"
#include "tasks/reward_program.h"

namespace ppo {

namespace {

// A ground truth as text: a string as is, any other JSON value (a number, say) as JSON.
std::string truth_text(const nlohmann::json& ground_truth) {
  return ground_truth.is_string() ? ground_truth.get<std::string>() : ground_truth.dump();
}

Score from_math(const MathScore& m) {
  Score s;
  s.score = m.score;
  s.correct = m.correct;
  s.format_ok = m.format_ok;
  return s;
}

// A toy task's reward; its ground truth is {"target": ...} in the task's records, or the target string in veRL's.
RewardFunction toy_reward(const std::string& task_name) {
  std::shared_ptr<const Task> task = make_task(task_name);
  return [task](const RewardRequest& r) {
    if (r.sample->ground_truth.is_object()) return task->score(*r.sample, r.response);
    TaskSample sample = *r.sample;
    sample.ground_truth = {{"target", truth_text(r.sample->ground_truth)}};
    return task->score(sample, r.response);
  };
}

// Logic-RL's reward. Its prompt ends with "<think>", which the reward counts as the response's opening tag; a
// prompt that does not (a chat prompt without the opened think block, another system's) leaves it to the response.
Score kk_reward(const RewardRequest& r) {
  std::vector<std::string> names;
  std::vector<bool> solution;
  kk_truth(r.sample->ground_truth, names, solution);
  const std::string prompt = trim_right(r.prompt);
  const bool opens_think = prompt.size() >= 7 && prompt.compare(prompt.size() - 7, 7, "<think>") == 0;
  const KkScore k = kk_score(r.response, names, solution, opens_think);
  Score s;
  s.score = k.total;
  s.correct = k.correct;
  s.format_ok = k.format_score > 0;
  return s;
}

Score exact_match(const RewardRequest& r) {
  Score s;
  s.correct = trim(r.response) == trim(truth_text(r.sample->ground_truth));
  s.score = s.correct ? 1.0 : 0.0;
  return s;
}

}  // namespace

std::vector<std::string> reward_function_names() {
  return {"digit_sum", "exact_match", "gsm8k", "kk", "math", "reverse"};
}

RewardFunction make_reward_function(const std::string& name) {
  if (name == "exact_match") return exact_match;
  if (name == "gsm8k")
    return
        [](const RewardRequest& r) { return from_math(score_gsm8k(r.response, truth_text(r.sample->ground_truth))); };
  if (name == "math")
    return [](const RewardRequest& r) { return from_math(score_math(r.response, truth_text(r.sample->ground_truth))); };
  if (name == "kk") return kk_reward;
  if (name == "reverse" || name == "digit_sum") return toy_reward(name);
  throw UsageError("reward.function: unknown reward '" + name + "'; valid: " + join(reward_function_names(), ", "));
}

std::string reward_function_for(const std::string& data_source) {
  static const std::map<std::string, std::string> by_source = {
      {"openai/gsm8k", "gsm8k"},          {"lighteval/MATH", "math"}, {"DigitalLearningGmbH/MATH-lighteval", "math"},
      {"HuggingFaceH4/MATH-500", "math"}, {"kk_logic", "kk"},
  };
  if (auto it = by_source.find(data_source); it != by_source.end()) return it->second;
  for (const std::string& name : reward_function_names())
    if (name == data_source) return name;
  return "";
}

Rewarder::Rewarder(const RewardConfig& config, std::string default_source, int64_t rank, int64_t world_size)
    : config_(config), default_source_(std::move(default_source)) {
  if (!config_.function.empty()) functions_[config_.function] = make_reward_function(config_.function);
  if (!config_.command.empty()) {
    program_ = std::make_unique<RewardProgram>(
        config_.command, config_.timeout_s,
        std::vector<std::pair<std::string, std::string>>{{"PPO_RANK", std::to_string(rank)},
                                                         {"PPO_WORLD_SIZE", std::to_string(world_size)}},
        config_.batch_timeout_s);
  }
}

Rewarder::~Rewarder() = default;

std::string Rewarder::source_of(const TaskSample& sample) const {
  return sample.data_source.empty() ? default_source_ : sample.data_source;
}

void Rewarder::check(const std::vector<TaskSample>& samples) const {
  if (program_) return;
  for (const TaskSample& s : samples) {
    const std::string source = source_of(s);
    const std::string function = config_.function.empty() ? reward_function_for(source) : config_.function;
    if (function == "kk") {  // its ground truth is structured: a bad one stops here, named by its line
      std::vector<std::string> names;
      std::vector<bool> solution;
      try {
        kk_truth(s.ground_truth, names, solution);
      } catch (const UsageError& e) {
        const std::string what = e.what();
        throw UsageError((s.origin.empty() ? "" : s.origin + ": ") +
                         (what.rfind("kk ground truth", 0) == 0 ? what : "kk ground truth: " + what));
      }
    }
    if (!function.empty()) continue;
    const std::string valid = join(reward_function_names(), " | ");
    throw UsageError((s.origin.empty() ? "" : s.origin + ": ") + "data_source '" + source +
                     "' has no built-in reward; set reward.function (" + valid +
                     ") or reward.command (an external reward program)");
  }
}

std::vector<Score> Rewarder::score(const std::vector<RewardRequest>& requests) {
  std::vector<Score> scores;
  scores.reserve(requests.size());
  if (program_) {
    std::vector<nlohmann::json> lines;
    for (const RewardRequest& r : requests) {
      lines.push_back({{"data_source", source_of(*r.sample)},
                       {"prompt", r.prompt},
                       {"response", r.response},
                       {"ground_truth", r.sample->ground_truth},
                       {"extra_info", r.sample->extra_info},
                       {"index", r.sample->index}});
    }
    for (const RewardAnswer& a : program_->score(lines)) {
      Score s;
      s.score = a.score;
      s.has_correct = a.correct.has_value();
      s.correct = a.correct.value_or(false);
      s.extras = a.extras;
      if (auto it = s.extras.find("format_ok"); it != s.extras.end()) s.format_ok = it->second != 0;
      scores.push_back(std::move(s));
    }
    return scores;
  }
  for (const RewardRequest& r : requests) {
    const std::string name = config_.function.empty() ? reward_function_for(source_of(*r.sample)) : config_.function;
    usage_check(!name.empty(), "data_source '" + source_of(*r.sample) + "' has no built-in reward");
    auto it = functions_.find(name);
    if (it == functions_.end()) it = functions_.emplace(name, make_reward_function(name)).first;
    scores.push_back(it->second(r));
  }
  return scores;
}

}  // namespace ppo
