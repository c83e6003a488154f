// A long-lived child process spoken to in JSON lines: the engine of the external reward program (reward.command,
// tasks/reward_program.h) and of the multi-turn environment (rollout.multi_turn.environment.command,
// train/multi_turn.h).
//
// The program is started once with /bin/sh -c and stays up. Each exchange() sends it one compact JSON object per
// line on stdin and reads one line per request on stdout, in the same order. Its stderr is ours (logs go there). It
// should exit when its stdin reaches EOF.
//
// Failure is loud: a crash or early exit (noticed by its exit, also while a process it started still holds its
// stdout open), no answer line within timeout_s, a batch not answered within batch_timeout_s, an answer the caller
// rejects, or more answer lines than requests throws UsageError "KEY.command 'CMD': ..." naming the request
// concerned. The program is then killed; the next exchange() starts a fresh one.
#pragma once

#include <nlohmann/json.hpp>

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace ppo {

// The largest magnitude of a score or reward a program may answer: a finite value near float32's maximum would turn
// every loss into NaN (whitening squares it). veRL's rule-based rewards lie in [-10, 10]; 1e6 leaves room for any
// scale a reward program uses.
constexpr double kMaxRewardMagnitude = 1e6;
// UsageError naming `key` and the answer unless `value` is a finite number within kMaxRewardMagnitude.
void check_reward_value(double value, const std::string& key, const std::string& line);

// An answer line quoted for an error message, cut after 200 characters.
std::string quote_answer(const std::string& line);
// An answer line parsed as one JSON object (depth and size bounded); UsageError "not JSON: '...'" or "not a JSON
// object: '...'" otherwise.
nlohmann::json parse_answer_object(const std::string& line);

class JsonLinesProgram {
 public:
  // Takes answer line i (0-based in the exchange); throws UsageError on a bad one (the message then says which).
  using AnswerTaker = std::function<void(size_t i, const std::string& line)>;
  // Names request i of n in error messages ("response 3 of 8 (0-based)").
  using RequestNamer = std::function<std::string(size_t i, size_t n)>;

  // Starts `command` with /bin/sh -c (posix_spawn, not fork: the trainer runs under MPI) in its own process group,
  // stdin and stdout piped, stderr inherited. `key` is the config section its messages name ("reward" gives
  // reward.command, reward.timeout_s, reward.batch_timeout_s). `env` adds or replaces variables. `timeout_s` (> 0)
  // is the longest wait for the next answer line (an idle timeout: a long batch of a fast program is fine);
  // `batch_timeout_s` (> 0, or 0 for none) the longest wait for a whole batch. UsageError when the command is empty,
  // a timeout is out of range or /bin/sh cannot start.
  JsonLinesProgram(std::string key, std::string command, double timeout_s,
                   std::vector<std::pair<std::string, std::string>> env = {}, double batch_timeout_s = 0);
  // Closes its stdin, waits up to 2 s for it to exit, then SIGKILLs its process group and reaps it. Never throws.
  ~JsonLinesProgram();
  JsonLinesProgram(const JsonLinesProgram&) = delete;
  JsonLinesProgram& operator=(const JsonLinesProgram&) = delete;

  // Sends one line per request (compact JSON, invalid UTF-8 replaced by U+FFFD) and gives each answer line to
  // `take`, in order, writing and reading concurrently so a large batch cannot deadlock. On any failure the program
  // is killed and UsageError thrown; the next call restarts it.
  void exchange(const std::vector<nlohmann::json>& requests, const AnswerTaker& take, const RequestNamer& name);
  const std::string& command() const { return command_; }

 private:
  struct Batch;  // one exchange() call's requests and progress (json_lines_program.cpp)

  void start();
  // graceful: close its stdin and wait up to 2 s for it to exit before the SIGKILL.
  void stop(bool graceful) noexcept;
  // Before a batch: nothing may be waiting on its stdout (extra lines of an earlier batch, or EOF).
  void check_idle(const Batch& batch);
  // One poll() round: write what it takes, read what it has, parse complete lines. False at EOF on its stdout.
  bool pump(Batch& batch);
  void write_some(Batch& batch);
  bool read_some();                      // appends what its stdout has to out_; false at EOF
  bool read_waiting();                   // read_some when something is waiting right now
  bool exited_unanswered(Batch& batch);  // it has exited: takes what it left and says whether answers are missing
  void take_lines(Batch& batch);         // gives the complete lines in out_ to batch.take
  // Each kills the program and throws UsageError "KEY.command 'CMD': ...".
  [[noreturn]] void fail(const std::string& what);
  [[noreturn]] void fail_exited(const Batch& batch);  // "exited with status 1 before answering response 3 of 8"
  [[noreturn]] void fail_timeout(const Batch& batch);

  std::string key_;
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
