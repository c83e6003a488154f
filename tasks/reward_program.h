// An external reward program (reward.command): rewards computed by a long-lived child process in any language.
//
// Protocol (examples/reward/README.md; the engine is tasks/json_lines_program.h): the program is started once (per
// rank) with /bin/sh -c and stays up. For each batch it gets one compact JSON object per line on stdin (the caller
// builds them: data_source, prompt, response, ground_truth, extra_info) and must print one JSON object per line on
// stdout, in the same order, each with a finite number "score" and optionally "acc"/"correct" and other number or bool
// fields (logged as metrics). Its stderr is ours (logs go there). It should exit when its stdin reaches EOF.
//
// Failure is loud, never a silent zero reward: a crash or early exit (noticed by its exit, also while a process it
// started still holds its stdout open), no answer line within timeout_s, a batch not answered within
// batch_timeout_s, a malformed answer, or more answer lines than requests throws UsageError "reward.command 'CMD':
// ..." naming the 0-based index of the response concerned. The program is then killed; the next score() call
// starts a fresh one.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tasks/json_lines_program.h"

namespace ppo {

struct RewardAnswer {
  double score = 0;                      // "score": a finite number (required; a bool is not a score)
  std::optional<bool> correct;           // "acc" (or else "correct") when present: bool, or number (nonzero = true)
  std::map<std::string, double> extras;  // the other number/bool fields (bools as 0/1), logged as metrics
};

// Parses one answer line; UsageError with the problem ("not JSON: '...'", "no \"score\": '...'", a score outside
// float32's range, a field name with a control character, ...), without the command and index, which
// RewardProgram::score adds.
RewardAnswer parse_reward_answer(const std::string& line);

// reward.command's client: one answer per response, in order (JsonLinesProgram with the "reward" keys).
class RewardProgram {
 public:
  // See JsonLinesProgram's constructor (the trainer passes PPO_RANK and PPO_WORLD_SIZE in `env`).
  RewardProgram(std::string command, double timeout_s, std::vector<std::pair<std::string, std::string>> env = {},
                double batch_timeout_s = 0)
      : program_("reward", std::move(command), timeout_s, std::move(env), batch_timeout_s) {}

  // One answer per request (data_source, prompt, response, ground_truth, extra_info), in order. On any failure the
  // program is killed and UsageError thrown, naming the 0-based index of the response concerned; the next call
  // restarts it.
  std::vector<RewardAnswer> score(const std::vector<nlohmann::json>& requests);
  const std::string& command() const { return program_.command(); }

 private:
  JsonLinesProgram program_;
};

}  // namespace ppo
