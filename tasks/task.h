// Tasks: prompt sources and rule-based reward scorers, registered by name (tasks/datasets.h, with the data files).
//
// A Task generates samples (prompt, reference answer, ground truth) deterministically from a seed, scores a
// decoded response, and reads/writes its samples as JSONL (one record per line).
// Registered tasks:
//   reverse    toy: "12345>" -> "54321"; partial credit per matching position (tiny char-level models)
//   digit_sum  toy: "3+4+1=" -> "8"; partial credit by distance of the integer given
//   kk         Knights and Knaves puzzles with the Logic-RL reward (tasks/kk.h)
#pragma once

#include <nlohmann/json.hpp>

#include "common/error.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace ppo {

struct TaskSample {
  std::string prompt;  // text given to the policy (already in the task's prompt template)
  // The chat form, used instead of `prompt` with data.apply_chat_template (train/prompts.h): messages as in veRL's
  // "prompt" field, [{"role": ..., "content": ...}, ...] (empty: one user message holding `prompt`), and text the
  // assistant's turn starts with after the template's generation prompt (kk: "<think>").
  nlohmann::json messages = nlohmann::json::array();
  std::string response_prefix;
  std::string answer;           // reference response text (SFT target), without EOS
  nlohmann::json ground_truth;  // what the scorer needs (kk: the public dataset record's fields)
  int64_t difficulty = 0;       // digits for toy tasks, number of people for kk
  int64_t index = 0;            // position in the dataset
  // veRL records (tasks/verl_record.h): the record's data_source (picks the reward, names the metrics; a task's own
  // samples carry the task's name), its extra_info, and whether its prompt is a list of chat messages (rendered
  // with a chat template whatever data.apply_chat_template says).
  std::string data_source;
  nlohmann::json extra_info;
  bool prompt_is_chat = false;
  std::string origin;  // "file:line" of the record, for error messages; empty when generated
};

struct Score {
  double score = 0;                      // reward: [0, 1] for toy tasks, [-3, 3] for kk
  bool correct = false;                  // exact answer
  bool has_correct = true;               // the reward says what "correct" is (an external program may not)
  bool format_ok = true;                 // response has the expected shape (digits / Logic-RL tags)
  std::map<std::string, double> extras;  // further named values (an external program's extra fields)
};

// The most samples a task generates in one call (`ppo data --count`, a dataset made at start-up): more would only
// exhaust memory.
constexpr int64_t kMaxTaskSamples = int64_t{1} << 24;

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  // Deterministic for a seed; `count` in [0, kMaxTaskSamples]. Sample i has difficulty min + (i mod (max - min + 1))
  // (balanced by difficulty), and generate(k, ...) is a prefix of generate(k + m, ...) with the same seed and range.
  virtual std::vector<TaskSample> generate(int64_t count, int64_t min_difficulty, int64_t max_difficulty,
                                           uint64_t seed) const = 0;
  // `response` is the generated text after the prompt, EOS already stripped.
  virtual Score score(const TaskSample& sample, const std::string& response) const = 0;
  // One JSONL record. Default: {"prompt", "answer", "ground_truth", "difficulty", "index"}.
  virtual nlohmann::json to_json(const TaskSample& s) const;
  // Inverse of to_json; throws UsageError naming a missing or mistyped field ("index" is optional).
  virtual TaskSample from_json(const nlohmann::json& record) const;
  // The sample as a record in veRL's layout (tasks/verl_record.h), what data files in Parquet hold: data_source and
  // ability the task's name, the prompt as the text the task gives the policy (a string), reward_model
  // {"style": "rule", "ground_truth"}, extra_info {"index", "difficulty", "answer"}. Read back, it trains as the
  // task's own record does (the reward chosen by data_source is the task's).
  virtual nlohmann::json to_verl(const TaskSample& s) const;
};

// The toy tasks (reverse, digit_sum) by name; null for another name (make_task, tasks/datasets.h, knows them all).
std::unique_ptr<Task> make_toy_task(const std::string& name);

struct ScoreReport {
  std::vector<Score> scores;                         // one per sample, in order
  double mean_score = 0;                             // mean of scores[i].score
  double accuracy = 0;                               // fraction correct
  double format_rate = 0;                            // fraction format_ok
  std::map<int64_t, double> accuracy_by_difficulty;  // difficulty -> fraction correct
  std::map<int64_t, int64_t> count_by_difficulty;    // difficulty -> number of samples
};
// UsageError when the counts differ. The second form scores with `scorer` instead of task.score.
ScoreReport score_responses(const Task& task, const std::vector<TaskSample>& samples,
                            const std::vector<std::string>& responses);
ScoreReport score_responses(const std::vector<TaskSample>& samples, const std::vector<std::string>& responses,
                            const std::function<Score(const TaskSample&, const std::string&)>& scorer);

// Helpers shared by the generators: identical output on every standard library (std::uniform_int_distribution
// is not).
int64_t uniform_int(std::mt19937_64& rng, int64_t lo, int64_t hi);  // inclusive [lo, hi]

// Reads record[key] as T, or throws UsageError "missing field 'key'" / "field 'key': <type error>".
template <typename T>
T json_field(const nlohmann::json& record, const std::string& key) {
  usage_check(record.is_object(), "record is not a JSON object");
  auto it = record.find(key);
  usage_check(it != record.end(), "missing field '" + key + "'");
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {  // a float such as 1e300 does not convert
    usage_check(it->is_number_integer(), "field '" + key + "': expected a whole number, got " + it->dump());
    // nlohmann converts out-of-range whole numbers silently (18446744073709551615 becomes -1 as an int64_t).
    const bool fits =
        it->is_number_unsigned()
            ? it->get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
            : it->get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                  (std::is_unsigned_v<T> || it->get<int64_t>() <= static_cast<int64_t>(std::numeric_limits<T>::max()));
    usage_check(fits, "field '" + key + "': " + it->dump() + " is out of range (" +
                          std::to_string(std::numeric_limits<T>::min()) + " .. " +
                          std::to_string(std::numeric_limits<T>::max()) + ")");
  }
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception& e) {
    throw UsageError("field '" + key + "': " + e.what());
  }
}

}  // namespace ppo
