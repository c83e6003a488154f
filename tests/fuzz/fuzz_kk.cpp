// libFuzzer target for the Knights and Knaves statements and the Logic-RL answer parser (tasks/kk.cpp, kk_score.cpp,
// kk_task.cpp). The input's first line is JSON: an array of statements, or an object with "statements" and optionally
// "names" and "solution" (a public-dataset record, also read as a ground truth by kk_truth); the rest of the input is a
// response to score.
// Every call must either succeed or throw ppo::UsageError, and:
//   - a statement kk_evaluate accepts can be written as text (kk_statement_text);
//   - every assignment kk_solutions returns is consistent;
//   - a puzzle with one solution, formatted as a record (kk_format_record), loads (KkTask::from_json) and its
//     reference answer scores +3;
//   - kk_score's parts add up and its status matches them.
// Any other exception, crash, sanitizer report or failed check is a bug. Built and run by scripts/fuzz.sh
// (`bash scripts/fuzz.sh build 30 kk`).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "tasks/kk.h"

namespace {

using nlohmann::json;

// kk_solutions tries all 2^n assignments: beyond this many people one input would take seconds (the task has at most
// kKkMaxPeople = 8).
constexpr size_t kMaxSolvedPeople = 12;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_kk: %s\n", what.c_str());
  std::abort();
}

// The names of the puzzle: the record's when it has a list of strings, else the first n of the pool (or P0, P1, ...).
std::vector<std::string> puzzle_names(const json& puzzle, size_t n) {
  if (puzzle.is_object() && puzzle.contains("names") && puzzle["names"].is_array()) {
    std::vector<std::string> names;
    for (const json& name : puzzle["names"])
      if (name.is_string()) names.push_back(name.get<std::string>());
    if (names.size() == puzzle["names"].size()) return names;
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < n; ++i)
    names.push_back(i < ppo::kk_name_pool().size() ? ppo::kk_name_pool()[i] : "P" + std::to_string(i));
  return names;
}

// Each statement that evaluates (for the all-knights assignment) must also have a text.
void check_statements(const json& statements, const std::vector<std::string>& names) {
  const std::vector<bool> knights(names.size(), true);
  for (const json& statement : statements) {
    bool evaluates = true;
    try {
      ppo::kk_evaluate(statement, knights);
    } catch (const ppo::UsageError&) {
      evaluates = false;
    }
    try {
      ppo::kk_statement_text(names, statement);
    } catch (const ppo::UsageError& e) {
      if (evaluates) finding("kk_evaluate accepts " + statement.dump() + " but kk_statement_text throws: " + e.what());
    }
  }
}

// Solves the puzzle; for a unique solution, checks that its record loads and its reference answer scores +3.
void check_solutions(const json& statements) {
  if (!statements.is_array() || statements.size() > kMaxSolvedPeople) return;
  std::vector<std::vector<bool>> solutions;
  try {
    solutions = ppo::kk_solutions(statements);
  } catch (const ppo::UsageError&) {
    return;
  }
  for (const std::vector<bool>& knights : solutions)
    for (size_t i = 0; i < statements.size(); ++i)
      if (ppo::kk_evaluate(statements[i], knights) != knights[i])
        finding("kk_solutions returned an inconsistent assignment for " + statements.dump());
  if (solutions.size() != 1 || statements.size() > ppo::kk_name_pool().size()) return;
  std::mt19937_64 rng(statements.size());
  json record = ppo::kk_format_record(statements, solutions[0], rng);
  const ppo::KkTask task;
  const ppo::TaskSample sample = task.from_json(record);  // no catch: a formatted record must load
  const ppo::Score score = task.score(sample, sample.answer);
  if (score.score != 3.0 || !score.correct)
    finding("the reference answer of " + record.dump() + " scores " + std::to_string(score.score));
}

void check_score(const std::string& response, const std::vector<std::string>& names, const std::vector<bool>& solution,
                 bool prompt_opens_think) {
  const ppo::KkScore s = ppo::kk_score(response, names, solution, prompt_opens_think);
  const bool parts_ok = (s.format_score == 1.0 || s.format_score == -1.0) &&
                        (s.answer_score == 2.0 || s.answer_score == -1.5 || s.answer_score == -2.0) &&
                        s.total == s.format_score + s.answer_score;
  const bool status_ok = (s.status == "correct") == (s.answer_score == 2.0) && s.correct == (s.status == "correct") &&
                         (s.status == "bad_format") == (s.format_score < 0) &&
                         (s.status == "wrong_answer") == (s.answer_score == -1.5);
  if (!parts_ok || !status_ok)
    finding("inconsistent kk_score: format " + std::to_string(s.format_score) + ", answer " +
            std::to_string(s.answer_score) + ", total " + std::to_string(s.total) + ", status " + s.status);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  const std::string response = newline == std::string::npos ? "" : input.substr(newline + 1);
  const json puzzle = json::parse(input.substr(0, newline), nullptr, /*allow_exceptions=*/false);
  const json statements = puzzle.is_object() ? puzzle.value("statements", json()) : puzzle;
  const size_t n = statements.is_array() ? statements.size() : 2;
  const std::vector<std::string> names = puzzle_names(puzzle, n);
  if (statements.is_array()) {
    check_statements(statements, names);
    check_solutions(statements);
  }

  // The answer parser, with the record's names and solution (or the ground truth's, as kk_truth reads it).
  std::vector<std::string> truth_names = names;
  std::vector<bool> solution(names.size(), true);
  try {
    if (puzzle.is_object()) ppo::kk_truth(puzzle, truth_names, solution);
  } catch (const ppo::UsageError&) {
    truth_names = names;
    solution.assign(names.size(), true);
  }
  check_score(response, truth_names, solution, /*prompt_opens_think=*/true);
  check_score(response, truth_names, solution, /*prompt_opens_think=*/false);
  return 0;
}
