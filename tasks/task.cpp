// Toy tasks, the default JSON records and response scoring (see task.h).
#include "tasks/task.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <tuple>
#include <utility>

#include "common/json.h"
#include "common/jsonl.h"
#include "common/strings.h"

namespace ppo {

int64_t uniform_int(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  if (lo > hi) throw std::invalid_argument("uniform_int: lo > hi");
  const uint64_t range = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);  // hi - lo, mod 2^64
  if (range == std::numeric_limits<uint64_t>::max()) return static_cast<int64_t>(rng());
  const uint64_t span = range + 1;
  // Rejection sampling: accept x below the largest multiple of span that fits, so x % span is exactly uniform.
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % span;
  uint64_t x = rng();
  while (x >= limit) x = rng();
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + x % span);
}

namespace {
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Default JSON record.

nlohmann::json Task::to_json(const TaskSample& s) const {
  return {{"prompt", s.prompt},
          {"answer", s.answer},
          {"ground_truth", s.ground_truth},
          {"difficulty", s.difficulty},
          {"index", s.index}};
}

nlohmann::json Task::to_verl(const TaskSample& s) const {
  return {{"data_source", name()},
          {"prompt", s.prompt},
          {"ability", name()},
          {"reward_model", {{"style", "rule"}, {"ground_truth", s.ground_truth}}},
          {"extra_info", {{"index", s.index}, {"difficulty", s.difficulty}, {"answer", s.answer}}}};
}

TaskSample Task::from_json(const nlohmann::json& record) const {
  TaskSample s;
  s.prompt = json_field<std::string>(record, "prompt");
  s.answer = json_field<std::string>(record, "answer");
  s.ground_truth = json_field<nlohmann::json>(record, "ground_truth");
  s.difficulty = json_field<int64_t>(record, "difficulty");
  if (record.contains("index")) s.index = json_field<int64_t>(record, "index");
  return s;
}

// ---------------------------------------------------------------------------------------------------------------
// Toy tasks for tiny character-level models: printable ASCII only, prompts of at most 20 characters.

namespace {

// Shared generation loop of the toy tasks: sample i gets difficulty min + (i mod span) and the next draws of one rng;
// make_sample(rng, difficulty) returns its prompt and answer, which is also the ground truth {"target": answer}.
template <typename MakeSample>
std::vector<TaskSample> generate_balanced(const std::string& task, int64_t count, int64_t min_difficulty,
                                          int64_t max_difficulty, int64_t lowest, int64_t highest, uint64_t seed,
                                          MakeSample make_sample) {
  usage_check(count >= 0 && count <= kMaxTaskSamples,
              task + ": count " + std::to_string(count) + " is out of range: 0 to " + std::to_string(kMaxTaskSamples));
  usage_check(lowest <= min_difficulty && min_difficulty <= max_difficulty && max_difficulty <= highest,
              task + ": difficulty range [" + std::to_string(min_difficulty) + ", " + std::to_string(max_difficulty) +
                  "] is invalid; valid: " + std::to_string(lowest) + " <= min <= max <= " + std::to_string(highest));
  std::mt19937_64 rng(seed);
  const int64_t span = max_difficulty - min_difficulty + 1;
  std::vector<TaskSample> samples;
  samples.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    TaskSample s;
    s.difficulty = min_difficulty + i % span;
    std::tie(s.prompt, s.answer) = make_sample(rng, s.difficulty);
    s.ground_truth = {{"target", s.answer}};
    s.index = i;
    samples.push_back(std::move(s));
  }
  return samples;
}

std::string random_digits(std::mt19937_64& rng, int64_t n) {
  std::string digits;
  for (int64_t i = 0; i < n; ++i) digits += static_cast<char>('0' + uniform_int(rng, 0, 9));
  return digits;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_digit);
}

// Parses an optional '-' followed by 1..18 digits and nothing else.
std::optional<int64_t> parse_int(const std::string& s) {
  const size_t start = (!s.empty() && s[0] == '-') ? 1 : 0;
  const std::string digits = s.substr(start);
  if (!all_digits(digits) || digits.size() > 18) return std::nullopt;
  const int64_t value = std::stoll(digits);
  return start == 1 ? -value : value;
}

// "12345>" -> "54321".
class ReverseTask : public Task {
 public:
  std::string name() const override { return "reverse"; }

  std::vector<TaskSample> generate(int64_t count, int64_t min_difficulty, int64_t max_difficulty,
                                   uint64_t seed) const override {
    return generate_balanced(name(), count, min_difficulty, max_difficulty, /*lowest=*/1, /*highest=*/16, seed,
                             [](std::mt19937_64& rng, int64_t digits) {
                               const std::string x = random_digits(rng, digits);
                               return std::make_pair(x + ">", std::string(x.rbegin(), x.rend()));
                             });
  }

  // Dense partial credit, so that PPO from a random tiny model has a signal (an exact-match-only reward is ~0 for
  // thousands of steps): with L = max(|target|, |response|),
  //   score = 0.6 * #{i : response[i] == target[i]} / L      (right digit in the right place)
  //         + 0.2 * (1 - | |response| - |target| | / L)      (right length, i.e. EOS in the right place)
  //         + 0.2 * #{digits in response} / |response|       (digits at all)
  // in [0, 1], 1 only for the exact answer.
  Score score(const TaskSample& sample, const std::string& response) const override {
    const std::string target = json_field<std::string>(sample.ground_truth, "target");
    const std::string given = trim_right(response);
    Score result;
    const size_t denom = std::max(target.size(), given.size());
    size_t matches = 0, digits = 0;
    for (size_t i = 0; i < std::min(target.size(), given.size()); ++i) matches += target[i] == given[i];
    for (char ch : given) digits += ch >= '0' && ch <= '9';
    if (denom == 0) {
      result.score = 1.0;
    } else {
      const double L = static_cast<double>(denom);
      const double length_gap = std::abs(static_cast<double>(given.size()) - static_cast<double>(target.size()));
      result.score = 0.6 * static_cast<double>(matches) / L + 0.2 * (1.0 - length_gap / L) +
                     (given.empty() ? 0.0 : 0.2 * static_cast<double>(digits) / static_cast<double>(given.size()));
    }
    result.correct = given == target;
    result.format_ok = all_digits(given);
    return result;
  }
};

// "3+4+1=" -> "8".
class DigitSumTask : public Task {
 public:
  std::string name() const override { return "digit_sum"; }

  std::vector<TaskSample> generate(int64_t count, int64_t min_difficulty, int64_t max_difficulty,
                                   uint64_t seed) const override {
    return generate_balanced(name(), count, min_difficulty, max_difficulty, /*lowest=*/1, /*highest=*/10, seed,
                             [](std::mt19937_64& rng, int64_t digits) {
                               std::string prompt;
                               int64_t sum = 0;
                               for (int64_t i = 0; i < digits; ++i) {
                                 const int64_t d = uniform_int(rng, 0, 9);
                                 sum += d;
                                 prompt += (i > 0 ? "+" : "") + std::to_string(d);
                               }
                               return std::make_pair(prompt + "=", std::to_string(sum));
                             });
  }

  // 1 for the exact text; else, when the response is an integer, max(0, 1 - max(1, |given - true|) / 10) (so a
  // non-canonical "08" for 8 earns 0.9, never 1); 0 when it is not an integer.
  Score score(const TaskSample& sample, const std::string& response) const override {
    const std::string target = json_field<std::string>(sample.ground_truth, "target");
    const std::string given = trim_right(response);
    Score result;
    result.correct = given == target;
    const std::optional<int64_t> value = parse_int(given);
    const std::optional<int64_t> truth = parse_int(target);
    result.format_ok = value.has_value();
    if (result.correct) {
      result.score = 1.0;
    } else if (value && truth) {
      const double distance = std::max<double>(1.0, std::abs(static_cast<double>(*value - *truth)));
      result.score = std::max(0.0, 1.0 - distance / 10.0);
    }
    return result;
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// The toy tasks by name (tasks/datasets.h's registry adds kk).

std::unique_ptr<Task> make_toy_task(const std::string& name) {
  if (name == "reverse") return std::make_unique<ReverseTask>();
  if (name == "digit_sum") return std::make_unique<DigitSumTask>();
  return nullptr;
}

ScoreReport score_responses(const Task& task, const std::vector<TaskSample>& samples,
                            const std::vector<std::string>& responses) {
  return score_responses(samples, responses, [&](const TaskSample& sample, const std::string& response) {
    return task.score(sample, response);
  });
}

ScoreReport score_responses(const std::vector<TaskSample>& samples, const std::vector<std::string>& responses,
                            const std::function<Score(const TaskSample&, const std::string&)>& scorer) {
  usage_check(samples.size() == responses.size(), "score: " + std::to_string(responses.size()) + " responses for " +
                                                      std::to_string(samples.size()) +
                                                      " samples; the counts must be equal (one response per line)");
  ScoreReport report;
  std::map<int64_t, int64_t> correct_by_difficulty;
  int64_t correct = 0, format_ok = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const Score s = scorer(samples[i], responses[i]);
    report.scores.push_back(s);
    report.mean_score += s.score;
    correct += s.correct;
    format_ok += s.format_ok;
    report.count_by_difficulty[samples[i].difficulty] += 1;
    correct_by_difficulty[samples[i].difficulty] += s.correct;
  }
  if (!samples.empty()) {
    const double n = static_cast<double>(samples.size());
    report.mean_score /= n;
    report.accuracy = static_cast<double>(correct) / n;
    report.format_rate = static_cast<double>(format_ok) / n;
  }
  for (const auto& [difficulty, count] : report.count_by_difficulty) {
    report.accuracy_by_difficulty[difficulty] =
        static_cast<double>(correct_by_difficulty[difficulty]) / static_cast<double>(count);
  }
  return report;
}

}  // namespace ppo
