// An external reward program (reward.command): rewards computed by a long-lived child process in any language.
//
// Protocol (examples/reward/README.md): the program is started once (per rank) with /bin/sh -c and stays up. For
// each batch it gets one compact JSON object per line on stdin (the caller builds them: data_source, prompt,
// response, ground_truth, extra_info) and must print one JSON object per line on stdout, in the same order, each
// with a finite number "score" and optionally "acc"/"correct" and other number or bool fields (logged as metrics).
// Its stderr is ours (logs go there). It should exit when its stdin reaches EOF.
//
// Failure is loud, never a silent zero reward: a crash or early exit (noticed by its exit, also while a process it
// started still holds its stdout open), no answer line within timeout_s, a batch not answered within
// batch_timeout_s, a malformed answer, or more answer lines than requests throws UsageError "reward.command 'CMD':
// ..." naming the 0-based index of the response concerned. The program is then killed; the next score() call
// starts a fresh one.
#pragma once

#include <nlohmann/json.hpp>

#include <sys/types.h>

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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

class RewardProgram {
 public:
  // Starts `command` with /bin/sh -c (posix_spawn, not fork: the trainer runs under MPI) in its own process group,
  // stdin and stdout piped, stderr inherited. `env` adds or replaces variables (the trainer passes PPO_RANK and
  // PPO_WORLD_SIZE). `timeout_s` (> 0) is the longest wait for the next answer line (an idle timeout: a long batch
  // of a fast program is fine); `batch_timeout_s` (> 0, or 0 for none) the longest wait for a whole batch. UsageError
  // when the command is empty, a timeout is out of range or /bin/sh cannot start.
  RewardProgram(std::string command, double timeout_s, std::vector<std::pair<std::string, std::string>> env = {},
                double batch_timeout_s = 0);
  // Closes its stdin, waits up to 2 s for it to exit, then SIGKILLs its process group and reaps it. Never throws.
  ~RewardProgram();
  RewardProgram(const RewardProgram&) = delete;
  RewardProgram& operator=(const RewardProgram&) = delete;

  // Sends one line per request (compact JSON, invalid UTF-8 replaced by U+FFFD) and reads one answer line per
  // request, in order, writing and reading concurrently so a large batch cannot deadlock. On any failure the
  // program is killed and UsageError thrown; the next call restarts it.
  std::vector<RewardAnswer> score(const std::vector<nlohmann::json>& requests);
  const std::string& command() const { return command_; }

 private:
  struct Batch;  // one score() call's requests and progress (reward_program.cpp)

  void start();
  // graceful: close its stdin and wait up to 2 s for it to exit before the SIGKILL.
  void stop(bool graceful) noexcept;
  // Before a batch: nothing may be waiting on its stdout (extra lines of an earlier batch, or EOF).
  void check_idle(size_t count);
  // One poll() round: write what it takes, read what it has, parse complete lines. False at EOF on its stdout.
  bool pump(Batch& batch);
  void write_some(Batch& batch);
  bool read_some();                      // appends what its stdout has to out_; false at EOF
  bool read_waiting();                   // read_some when something is waiting right now
  bool exited_unanswered(Batch& batch);  // it has exited: takes what it left and says whether answers are missing
  void take_lines(Batch& batch);         // parses the complete lines in out_ into batch.answers
  // Each kills the program and throws UsageError "reward.command 'CMD': ...".
  [[noreturn]] void fail(const std::string& what);
  [[noreturn]] void fail_exited(size_t index, size_t count);  // "exited with status 1 before answering response 3"
  [[noreturn]] void fail_timeout(const Batch& batch);

  std::string command_;
  double timeout_s_;
  double batch_timeout_s_;
  std::vector<std::pair<std::string, std::string>> env_;
  pid_t pid_ = -1;      // the /bin/sh child, leader of its own process group; -1 when not running
  int stdin_fd_ = -1;   // our end of its stdin (non-blocking)
  int stdout_fd_ = -1;  // our end of its stdout (non-blocking)
  std::string out_;     // bytes read from its stdout and not yet parsed
};

}  // namespace ppo
