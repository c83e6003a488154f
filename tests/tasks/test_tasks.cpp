// Toy tasks, registry, JSONL I/O and score_responses.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "tasks/datasets.h"
#include "tasks/task.h"
#include "tests/tasks/same_samples.h"
#include "tests/temp_dir.h"
#include "tests/usage_error.h"

namespace {

// A path in a fresh temporary folder, removed with the folder when the guard goes out of scope.
struct TempFile {
  ppo_test::TempDir dir;
  std::string path;
  explicit TempFile(const std::string& stem) : dir(stem), path(dir.sub(stem + ".jsonl")) {}
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

using ppo_test::usage_error_message;

ppo::TaskSample toy_sample(const std::string& target) {
  ppo::TaskSample s;
  s.answer = target;
  s.ground_truth = {{"target", target}};
  return s;
}

}  // namespace

TEST_CASE("uniform_int stays in range and hits every value", "[cpu][tasks]") {
  std::mt19937_64 rng(7);
  std::vector<int64_t> counts(7, 0);
  for (int i = 0; i < 7000; ++i) {
    const int64_t v = ppo::uniform_int(rng, -3, 3);
    REQUIRE(v >= -3);
    REQUIRE(v <= 3);
    counts[v + 3] += 1;
  }
  // Expected 1000 each; a uniform draw stays within +-20% (std dev ~29) with overwhelming probability.
  for (int64_t c : counts) CHECK(std::abs(c - 1000) < 200);
  CHECK(ppo::uniform_int(rng, 5, 5) == 5);
  // Same seed, same stream.
  std::mt19937_64 a(123), b(123);
  for (int i = 0; i < 100; ++i) REQUIRE(ppo::uniform_int(a, 0, 1000000) == ppo::uniform_int(b, 0, 1000000));
}

TEST_CASE("make_task knows the registered tasks and lists them for a bad name", "[cpu][tasks]") {
  CHECK(ppo::task_names() == std::vector<std::string>{"digit_sum", "kk", "reverse"});
  for (const std::string& name : ppo::task_names()) CHECK(ppo::make_task(name)->name() == name);
  CHECK(usage_error_message([] { ppo::make_task("x"); }) ==
        "data.task: unknown task 'x'; valid: digit_sum, kk, reverse");
}

TEST_CASE("reverse: golden scores", "[cpu][tasks]") {
  const auto task = ppo::make_task("reverse");
  const ppo::TaskSample s = toy_sample("54321");
  struct Case {
    std::string response;
    double score;
    bool correct;
  };
  // score = 0.6 matches / L + 0.2 (1 - |len gap| / L) + 0.2 digit fraction, L = max(len(target), len(response)),
  // trailing whitespace trimmed.
  const std::vector<Case> cases = {
      {"54321", 1.0, true},                                 // exact
      {"54321 \n", 1.0, true},                              // trailing whitespace trimmed
      {"54300", 0.6 * 3 / 5 + 0.2 + 0.2, false},            // positions 0,1,2 match, right length, all digits
      {"543", 0.6 * 3 / 5 + 0.2 * 3 / 5 + 0.2, false},      // 3 matches / 5, length gap 2 of 5
      {"5432100", 0.6 * 5 / 7 + 0.2 * 5 / 7 + 0.2, false},  // 5 matches / 7, gap 2 of 7
      {"12345", 0.6 / 5 + 0.2 + 0.2, false},                // only the middle '3' matches
      {"", 0.0, false},                                     // nothing: no match, gap 5 of 5, no digits
      {" 54321", 0.2 * 5 / 6 + 0.2 * 5 / 6, false},         // shifted: no match, gap 1 of 6, 5 of 6 digits
      {"ab", 0.2 * 2 / 5, false},                           // no digits, gap 3 of 5
  };
  for (const Case& c : cases) {
    INFO("response '" << c.response << "'");
    const ppo::Score got = task->score(s, c.response);
    CHECK(got.score == Approx(c.score).margin(1e-12));
    CHECK(got.correct == c.correct);
  }
  CHECK_FALSE(task->score(s, "54a21").format_ok);
  CHECK(task->score(s, "11111").format_ok);
}

TEST_CASE("digit_sum: golden scores", "[cpu][tasks]") {
  const auto task = ppo::make_task("digit_sum");
  const ppo::TaskSample s = toy_sample("8");
  struct Case {
    std::string response;
    double score;
    bool correct;
    bool format_ok;
  };
  // Exact -> 1; integer -> max(0, 1 - max(1, |given - 8|) / 10); anything else -> 0.
  const std::vector<Case> cases = {
      {"8", 1.0, true, true},   {"8\n", 1.0, true, true},  {"7", 0.9, false, true},  {"13", 0.5, false, true},
      {"08", 0.9, false, true}, {"20", 0.0, false, true},  {"-2", 0.0, false, true}, {"x", 0.0, false, false},
      {"", 0.0, false, false},  {"8+", 0.0, false, false},
  };
  for (const Case& c : cases) {
    INFO("response '" << c.response << "'");
    const ppo::Score got = task->score(s, c.response);
    CHECK(got.score == Approx(c.score).margin(1e-12));
    CHECK(got.correct == c.correct);
    CHECK(got.format_ok == c.format_ok);
  }
}

TEST_CASE("toy generators: well-formed, balanced by difficulty, deterministic", "[cpu][tasks]") {
  for (const std::string name : {"reverse", "digit_sum"}) {
    INFO("task " << name);
    const auto task = ppo::make_task(name);
    const auto samples = task->generate(40, 1, 8, 42);
    REQUIRE(samples.size() == 40);
    for (size_t i = 0; i < samples.size(); ++i) {
      const ppo::TaskSample& s = samples[i];
      INFO("prompt '" << s.prompt << "' answer '" << s.answer << "'");
      CHECK(s.index == static_cast<int64_t>(i));
      CHECK(s.difficulty == 1 + static_cast<int64_t>(i % 8));
      CHECK(s.prompt.size() <= 20);
      for (char c : s.prompt + s.answer) CHECK((c >= 32 && c < 127));
      CHECK(s.ground_truth["target"] == s.answer);
      CHECK(task->score(s, s.answer).correct);
      CHECK(task->score(s, s.answer).score == 1.0);
      if (name == "reverse") {
        // prompt = digits + ">", answer = the digits reversed.
        REQUIRE(s.prompt.back() == '>');
        const std::string digits = s.prompt.substr(0, s.prompt.size() - 1);
        CHECK(static_cast<int64_t>(digits.size()) == s.difficulty);
        CHECK(s.answer == std::string(digits.rbegin(), digits.rend()));
      } else {
        // prompt = "d+d+...+d=", answer = the sum.
        REQUIRE(s.prompt.back() == '=');
        int sum = 0, digits = 0;
        for (char c : s.prompt) {
          if (c >= '0' && c <= '9') sum += c - '0', ++digits;
        }
        CHECK(digits == s.difficulty);
        CHECK(s.answer == std::to_string(sum));
      }
    }
    // Same seed -> same data; the first k samples do not depend on the count; another seed differs.
    const auto again = task->generate(40, 1, 8, 42);
    const auto prefix = task->generate(10, 1, 8, 42);
    const auto other = task->generate(40, 1, 8, 43);
    int differing = 0;
    for (size_t i = 0; i < samples.size(); ++i) {
      CHECK(task->to_json(samples[i]) == task->to_json(again[i]));
      if (i < prefix.size()) CHECK(task->to_json(samples[i]) == task->to_json(prefix[i]));
      differing += samples[i].prompt != other[i].prompt;
    }
    CHECK(differing > 20);
    CHECK_THROWS_AS(task->generate(5, 0, 3, 1), ppo::UsageError);
    CHECK_THROWS_AS(task->generate(5, 4, 3, 1), ppo::UsageError);
    CHECK_THROWS_AS(task->generate(5, 1, 40, 1), ppo::UsageError);
  }
}

TEST_CASE("JSONL: toy samples round-trip through a file", "[cpu][tasks]") {
  for (const std::string name : {"reverse", "digit_sum"}) {
    const auto task = ppo::make_task(name);
    const auto samples = task->generate(25, 1, 6, 9);
    TempFile file("ppo_tasks_roundtrip");
    ppo::write_jsonl(*task, samples, file.path);
    const auto loaded = ppo::load_samples(*task, file.path);
    ppo_test::require_same_samples(loaded, samples);
  }
}

TEST_CASE("JSONL: errors name file and line", "[cpu][tasks]") {
  const auto task = ppo::make_task("reverse");
  TempFile file("ppo_tasks_bad");
  const std::string good = R"({"prompt":"12>","answer":"21","ground_truth":{"target":"21"},"difficulty":2})";

  // Line 3 is broken JSON (line 2 is blank and skipped).
  write_text(file.path, good + "\n\n{\"prompt\": \n" + good + "\n");
  std::string message = usage_error_message([&] { ppo::load_samples(*task, file.path); });
  CHECK(message.find(file.path + ":3:") == 0);
  CHECK(message.find("invalid JSON") != std::string::npos);

  // Line 2 misses "answer".
  write_text(file.path, good + "\n{\"prompt\":\"1>\",\"ground_truth\":{},\"difficulty\":1}\n");
  message = usage_error_message([&] { ppo::load_samples(*task, file.path); });
  CHECK(message.find(file.path + ":2:") == 0);
  CHECK(message.find("missing field 'answer'") != std::string::npos);

  // Line 1 has a mistyped field.
  write_text(file.path, R"({"prompt":"12>","answer":"21","ground_truth":{},"difficulty":"two"})");
  message = usage_error_message([&] { ppo::load_samples(*task, file.path); });
  CHECK(message.find(file.path + ":1:") == 0);
  CHECK(message.find("difficulty") != std::string::npos);

  // Missing index -> position among the loaded samples.
  write_text(file.path, good + "\n" + good + "\n");
  const auto loaded = ppo::load_samples(*task, file.path);
  REQUIRE(loaded.size() == 2);
  CHECK(loaded[1].index == 1);

  const std::string missing = file.path + ".does_not_exist";
  message = usage_error_message([&] { ppo::load_samples(*task, missing); });
  CHECK(message.find(missing) == 0);
  CHECK(message.find("no such file") != std::string::npos);
}

TEST_CASE("score_responses: per-line scores, accuracy by difficulty", "[cpu][tasks]") {
  const auto task = ppo::make_task("reverse");
  std::vector<ppo::TaskSample> samples = {toy_sample("21"), toy_sample("321"), toy_sample("4321")};
  samples[0].difficulty = 2, samples[1].difficulty = 3, samples[2].difficulty = 4;
  TempFile file("ppo_tasks_responses");
  write_text(file.path, "{\"response\":\"21\"}\n{\"response\":\"301\"}\n\n{\"response\":\"4321\",\"extra\":1}\n");
  const std::vector<std::string> responses = ppo::load_responses_jsonl(file.path);
  REQUIRE(responses == std::vector<std::string>{"21", "301", "4321"});

  const ppo::ScoreReport report = ppo::score_responses(*task, samples, responses);
  REQUIRE(report.scores.size() == 3);
  // "301" vs "321": 2 of 3 positions match, same length, all digits -> 0.6 * 2/3 + 0.2 + 0.2 = 0.8.
  // Scores 1, 0.8, 1 -> mean 2.8 / 3; 2 of 3 correct.
  CHECK(report.scores[1].score == Approx(0.8).margin(1e-12));
  CHECK(report.mean_score == Approx(2.8 / 3).margin(1e-12));
  CHECK(report.accuracy == Approx(2.0 / 3).margin(1e-12));
  CHECK(report.accuracy_by_difficulty.at(2) == 1.0);
  CHECK(report.accuracy_by_difficulty.at(3) == 0.0);
  CHECK(report.count_by_difficulty.at(4) == 1);

  CHECK_THROWS_AS(ppo::score_responses(*task, samples, {"21"}), ppo::UsageError);
  write_text(file.path, "{\"response\":\"21\"}\n{\"text\":\"x\"}\n");
  const std::string message = usage_error_message([&] { ppo::load_responses_jsonl(file.path); });
  CHECK(message.find(file.path + ":2:") == 0);
  CHECK(message.find("missing field 'response'") != std::string::npos);
}
