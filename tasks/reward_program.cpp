// reward.command's answers (see reward_program.h).
#include "tasks/reward_program.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/strings.h"

namespace ppo {

namespace {

// "acc" (or else "correct"), when present and not null: a bool, or a number (nonzero = true).
std::optional<bool> parse_correct(const nlohmann::json& answer, const std::string& line) {
  for (const std::string key : {"acc", "correct"}) {
    const auto it = answer.find(key);
    if (it == answer.end() || it->is_null()) continue;
    if (it->is_boolean()) return it->get<bool>();
    usage_check(it->is_number(), "\"" + key + "\" is not a bool or a number: " + quote_answer(line));
    return it->get<double>() != 0;
  }
  return std::nullopt;
}

}  // namespace

RewardAnswer parse_reward_answer(const std::string& line) {
  const nlohmann::json answer = parse_answer_object(line);
  const auto score = answer.find("score");
  usage_check(score != answer.end(), "no \"score\": " + quote_answer(line));
  usage_check(score->is_number(), "\"score\" is not a number: " + quote_answer(line));
  RewardAnswer parsed;
  parsed.score = score->get<double>();
  check_reward_value(parsed.score, "score", line);
  parsed.correct = parse_correct(answer, line);
  for (const auto& [key, value] : answer.items()) {
    if (key == "score" || key == "acc" || key == "correct") continue;
    // Field names become metric names (reward/<source>/<name>/mean), gathered over the ranks.
    usage_check(!key.empty() && !has_control_character(key),
                "field name " + nlohmann::json(key).dump() +
                    " is empty or holds a control character (it names a metric): " + quote_answer(line));
    if (value.is_boolean()) parsed.extras[key] = value.get<bool>() ? 1.0 : 0.0;
    if (value.is_number()) parsed.extras[key] = value.get<double>();
  }
  return parsed;
}

std::vector<RewardAnswer> RewardProgram::score(const std::vector<nlohmann::json>& requests) {
  std::vector<RewardAnswer> answers;
  answers.reserve(requests.size());
  program_.exchange(
      requests, [&](size_t, const std::string& line) { answers.push_back(parse_reward_answer(line)); },
      [](size_t i, size_t n) { return "response " + std::to_string(i) + " of " + std::to_string(n) + " (0-based)"; });
  return answers;
}

}  // namespace ppo
