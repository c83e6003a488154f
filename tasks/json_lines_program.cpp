// A child process spoken to in JSON lines over pipes (see json_lines_program.h).
#include "tasks/json_lines_program.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/json.h"

extern char** environ;

namespace ppo {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kQuoteChars = 200;          // an answer line quoted in an error is cut here
constexpr size_t kMaxLineBytes = 16u << 20;  // a partial answer line longer than this is an error, not more memory
constexpr double kMaxTimeoutS = 1e6;         // longer timeouts are clamped (keeps the chrono arithmetic finite)
constexpr auto kExitWait = std::chrono::seconds(1);  // after EOF on its stdout, how long it may take to exit
constexpr auto kStopWait = std::chrono::seconds(2);  // after EOF on its stdin (destructor), the same
// While waiting for answers, how often to look whether it exited: a process it started may hold its stdout open,
// so no EOF would ever come.
constexpr int kExitCheckMs = 100;

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

std::string seconds_text(double s) {
  std::ostringstream out;
  out << s;
  return out.str();
}

// Writing to a program that has exited raises SIGPIPE, whose default action would kill the trainer. Ignored once,
// process-wide, unless someone installed a handler: the write then fails with EPIPE, which we report as the
// program's exit. Children get the default action back (spawn_shell).
void ignore_sigpipe_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    if (sigaction(SIGPIPE, nullptr, &old) != 0 || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) return;
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, nullptr);
  });
}

// A file descriptor closed at scope exit unless released.
struct Fd {
  int fd = -1;
  Fd() = default;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int release() { return std::exchange(fd, -1); }
};

void close_fd(int& fd) noexcept {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Both ends close-on-exec, so no other child inherits them, and numbered above 0..2, so that the child's dup2 onto
// its stdin or stdout never meets an end with that same number (a dup2 onto itself would keep FD_CLOEXEC).
bool open_pipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return false;
  read_end.fd = fds[0];
  write_end.fd = fds[1];
  for (Fd* end : {&read_end, &write_end}) {
    if (end->fd > STDERR_FILENO) continue;
    const int moved = fcntl(end->fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    if (moved < 0) return false;
    ::close(end->fd);
    end->fd = moved;
  }
  return true;
}

bool set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// Our environment with `env` added (a name already there takes the new value).
std::vector<std::string> child_environment(const std::vector<std::pair<std::string, std::string>>& env) {
  std::vector<std::string> vars;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string var = *e;
    const std::string name = var.substr(0, var.find('='));
    const bool replaced = std::any_of(env.begin(), env.end(), [&](const auto& kv) { return kv.first == name; });
    if (!replaced) vars.push_back(var);
  }
  for (const auto& [name, value] : env) vars.push_back(name + "=" + value);
  return vars;
}

// /bin/sh -c `command` with the given stdin and stdout; returns the pid, or -1 with `error` set. posix_spawn, not
// fork: forking an MPI (or CUDA) process is unsafe. The child leads a new process group, so one kill reaches what it
// starts too, and gets an empty signal mask and the default SIGPIPE action.
pid_t spawn_shell(const std::string& command, const std::vector<std::string>& env, int child_stdin, int child_stdout,
                  int& error) {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_adddup2(&actions, child_stdin, STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, child_stdout, STDOUT_FILENO);
  sigset_t no_signals, sigpipe_only;
  sigemptyset(&no_signals);
  sigemptyset(&sigpipe_only);
  sigaddset(&sigpipe_only, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &no_signals);
  posix_spawnattr_setsigdefault(&attr, &sigpipe_only);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::string sh = "/bin/sh", dash_c = "-c", cmd = command;
  std::vector<char*> argv = {sh.data(), dash_c.data(), cmd.data(), nullptr};
  std::vector<std::string> env_copy = env;
  std::vector<char*> envp;
  for (std::string& var : env_copy) envp.push_back(var.data());
  envp.push_back(nullptr);

  pid_t pid = -1;
  error = posix_spawn(&pid, sh.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  return error == 0 ? pid : -1;
}

// How `pid` ended once it has exited within `limit` (nullopt while it still runs). It is left unreaped (WNOWAIT),
// so its pid and process group id cannot be reused before we kill the group. si_pid == 0: it is gone but its
// status is unknown (someone else reaped it, e.g. SIGCHLD is ignored).
std::optional<siginfo_t> wait_exited(pid_t pid, Clock::duration limit) {
  const auto end = Clock::now() + limit;
  while (true) {
    siginfo_t info{};
    const int r = waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
    if (r == 0 && info.si_pid == pid) return info;
    if (r != 0 && errno != EINTR) return siginfo_t{};
    if (Clock::now() >= end) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::string describe_exit(const siginfo_t& info) {
  if (info.si_pid == 0) return "exited";
  if (info.si_code == CLD_EXITED) {
    const int status = info.si_status;
    const char* hint = status == 127 ? " (command not found?)" : status == 126 ? " (not executable?)" : "";
    return "exited with status " + std::to_string(status) + hint;
  }
  const char* name = strsignal(info.si_status);
  return "was killed by signal " + std::to_string(info.si_status) + " (" + (name ? name : "?") + ")";
}

}  // namespace

void check_reward_value(double value, const std::string& key, const std::string& line) {
  usage_check(std::isfinite(value), "\"" + key + "\" is not finite: " + quote_answer(line));
  usage_check(std::abs(value) <= kMaxRewardMagnitude, "\"" + key + "\" " + nlohmann::json(value).dump() +
                                                          " is outside [-1e6, 1e6], the range of scores and rewards "
                                                          "(rescale it in the program): " +
                                                          quote_answer(line));
}

std::string quote_answer(const std::string& line) {
  return "'" + (line.size() > kQuoteChars ? line.substr(0, kQuoteChars) + "..." : line) + "'";
}

nlohmann::json parse_answer_object(const std::string& line) {
  nlohmann::json answer;
  try {
    answer = parse_json_bounded(line);
  } catch (const nlohmann::json::exception&) {
    throw UsageError("not JSON: " + quote_answer(line));
  } catch (const UsageError& e) {
    throw UsageError(std::string(e.what()) + ": " + quote_answer(line));
  }
  usage_check(answer.is_object(), "not a JSON object: " + quote_answer(line));
  return answer;
}

// One exchange() call: the request lines and how far writing and reading have got.
struct JsonLinesProgram::Batch {
  std::string payload;            // every request's line, '\n'-terminated
  std::vector<size_t> line_ends;  // offset in payload just past request i's line
  size_t written = 0;             // bytes of payload written to its stdin
  bool stdin_closed = false;      // writing failed with EPIPE: it closed its stdin or exited
  size_t answered = 0;            // answer lines taken
  const JsonLinesProgram::AnswerTaker* take = nullptr;
  const JsonLinesProgram::RequestNamer* name = nullptr;
  Clock::time_point deadline;        // for the next answer line
  Clock::time_point batch_deadline;  // for the whole batch (the batch timeout; max() when none)
  Clock::duration timeout{};         // the line timeout

  size_t size() const { return line_ends.size(); }
  std::string named(size_t i) const { return (*name)(i, size()); }
  bool writing() const { return written < payload.size() && !stdin_closed; }
};

JsonLinesProgram::JsonLinesProgram(std::string key, std::string command, double timeout_s,
                                   std::vector<std::pair<std::string, std::string>> env, double batch_timeout_s)
    : key_(std::move(key)),
      command_(std::move(command)),
      timeout_s_(timeout_s),
      batch_timeout_s_(batch_timeout_s),
      env_(std::move(env)) {
  usage_check(!command_.empty(), key_ + ".command is empty");
  usage_check(std::isfinite(timeout_s_) && timeout_s_ > 0,
              key_ + ".timeout_s must be a positive number of seconds, not " + seconds_text(timeout_s_));
  usage_check(
      std::isfinite(batch_timeout_s_) && batch_timeout_s_ >= 0,
      key_ + ".batch_timeout_s must be a number of seconds >= 0 (0: none), not " + seconds_text(batch_timeout_s_));
  start();
}

JsonLinesProgram::~JsonLinesProgram() {
  stop(/*graceful=*/true);
}

void JsonLinesProgram::start() {
  ignore_sigpipe_once();
  Fd in_read, in_write, out_read, out_write;
  if (!open_pipe(in_read, in_write) || !open_pipe(out_read, out_write) || !set_nonblocking(in_write.fd) ||
      !set_nonblocking(out_read.fd)) {
    throw UsageError(key_ + ".command '" + command_ + "': cannot make its pipes: " + std::strerror(errno));
  }
  int error = 0;
  pid_ = spawn_shell(command_, child_environment(env_), in_read.fd, out_write.fd, error);
  if (pid_ < 0) throw UsageError(key_ + ".command '" + command_ + "': cannot start /bin/sh: " + std::strerror(error));
  stdin_fd_ = in_write.release();
  stdout_fd_ = out_read.release();
  out_.clear();
}

void JsonLinesProgram::stop(bool graceful) noexcept {
  if (pid_ < 0) return;
  close_fd(stdin_fd_);  // EOF on its stdin: the protocol's request to exit
  if (graceful) wait_exited(pid_, kStopWait);
  ::kill(-pid_, SIGKILL);  // its whole group, while its unreaped pid still reserves the group id
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  close_fd(stdout_fd_);
  pid_ = -1;
  out_.clear();
}

void JsonLinesProgram::fail(const std::string& what) {
  stop(/*graceful=*/false);
  throw UsageError(key_ + ".command '" + command_ + "': " + what);
}

void JsonLinesProgram::fail_exited(const Batch& batch) {
  const std::optional<siginfo_t> exit = wait_exited(pid_, kExitWait);
  const std::string how = exit ? describe_exit(*exit) : "closed its stdout";
  fail(how + " before answering " + batch.named(batch.answered) + "; its stderr is above");
}

bool JsonLinesProgram::read_some() {
  char buffer[1 << 16];
  const ssize_t n = ::read(stdout_fd_, buffer, sizeof buffer);
  if (n > 0) out_.append(buffer, static_cast<size_t>(n));
  if (n == 0) return false;
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    fail(std::string("cannot read its stdout: ") + std::strerror(errno));
  }
  return true;
}

bool JsonLinesProgram::read_waiting() {
  pollfd ready{stdout_fd_, POLLIN, 0};
  if (poll(&ready, 1, /*timeout=*/0) <= 0) return true;
  return read_some();
}

void JsonLinesProgram::check_idle(const Batch& batch) {
  // Output before the first request: the extra lines of an earlier batch, or EOF (it exited between batches).
  if (!read_waiting()) fail_exited(batch);
  if (!out_.empty()) {
    fail("printed " + quote_answer(first_line(out_)) +
         " before this batch's first request (more answer lines than requests in an earlier batch?)");
  }
}

void JsonLinesProgram::write_some(Batch& batch) {
  const ssize_t n = ::write(stdin_fd_, batch.payload.data() + batch.written, batch.payload.size() - batch.written);
  if (n >= 0) {
    batch.written += static_cast<size_t>(n);
  } else if (errno == EPIPE) {
    batch.stdin_closed = true;  // EOF on its stdout or the timeout will tell the rest
  } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    fail(std::string("cannot write to its stdin: ") + std::strerror(errno));
  }
}

void JsonLinesProgram::take_lines(Batch& batch) {
  size_t begin = 0;
  for (size_t end; (end = out_.find('\n', begin)) != std::string::npos; begin = end + 1) {
    std::string line = out_.substr(begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t i = batch.answered, n = batch.size();
    if (i == n) {
      fail("more answer lines than requests: after answering " + batch.named(n - 1) + " it printed " +
           quote_answer(line));
    }
    // It cannot have read request i yet, so this line answers an earlier one twice.
    if (batch.written < batch.line_ends[i]) {
      const std::string hint = " before that request was sent (more answer lines than requests?): ";
      fail("printed an answer for " + batch.named(i) + hint + quote_answer(line));
    }
    try {
      (*batch.take)(i, line);
    } catch (const UsageError& e) {
      fail("bad answer to " + batch.named(i) + ": " + e.what());
    }
    ++batch.answered;
    batch.deadline = Clock::now() + batch.timeout;
  }
  out_.erase(0, begin);
  if (out_.size() > kMaxLineBytes) {
    fail("answer to " + batch.named(batch.answered) + " is over 16 MiB without a newline: " + quote_answer(out_));
  }
}

bool JsonLinesProgram::exited_unanswered(Batch& batch) {
  if (!wait_exited(pid_, Clock::duration::zero())) return false;
  for (;;) {  // what it wrote before it exited
    pollfd waiting{stdout_fd_, POLLIN, 0};
    if (poll(&waiting, 1, /*timeout=*/0) <= 0 || !read_some()) break;
    take_lines(batch);
  }
  return batch.answered < batch.size();
}

bool JsonLinesProgram::pump(Batch& batch) {
  const auto left = std::min(batch.deadline, batch.batch_deadline) - Clock::now();
  if (left <= Clock::duration::zero()) fail_timeout(batch);
  pollfd fds[2] = {{stdout_fd_, POLLIN, 0}, {stdin_fd_, POLLOUT, 0}};
  const bool writing = batch.writing();
  const auto left_ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  const int wait_ms = static_cast<int>(std::clamp<int64_t>(left_ms, 1, kExitCheckMs));
  const int ready = poll(fds, writing ? 2 : 1, wait_ms);
  if (ready < 0 && errno != EINTR) fail(std::string("poll: ") + std::strerror(errno));
  if (ready == 0 && exited_unanswered(batch)) return false;
  if (ready <= 0) return true;
  if (writing && fds[1].revents != 0) write_some(batch);
  if (fds[0].revents == 0) return true;
  if (!read_some()) return false;
  take_lines(batch);
  return true;
}

void JsonLinesProgram::fail_timeout(const Batch& batch) {
  const size_t i = batch.answered, n = batch.size();
  // Its stdout may still be open in a process it started after it died itself: report the death, not the wait.
  if (wait_exited(pid_, Clock::duration::zero())) fail_exited(batch);
  if (Clock::now() >= batch.batch_deadline)
    fail("the batch of " + std::to_string(n) + " requests was not answered within " + key_ +
         ".batch_timeout_s=" + seconds_text(batch_timeout_s_) + " s (" + std::to_string(i) + " answers came)");
  fail("no answer to " + batch.named(i) + " within " + key_ + ".timeout_s=" + seconds_text(timeout_s_) + " s" +
       (batch.stdin_closed ? " (it closed its stdin)" : "") +
       "; it must print one JSON line per request line and flush it");
}

void JsonLinesProgram::exchange(const std::vector<nlohmann::json>& requests, const AnswerTaker& take,
                                const RequestNamer& name) {
  if (requests.empty()) return;
  if (pid_ < 0) start();  // after a failure
  Batch batch;
  batch.take = &take;
  batch.name = &name;
  for (const nlohmann::json& request : requests) {
    // Generated text may hold invalid UTF-8 (a token cut inside a character): replaced, not an exception.
    batch.payload += request.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    batch.payload += '\n';
    batch.line_ends.push_back(batch.payload.size());
  }
  check_idle(batch);
  batch.timeout =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::min(timeout_s_, kMaxTimeoutS)));
  batch.deadline = Clock::now() + batch.timeout;
  batch.batch_deadline =
      batch_timeout_s_ > 0 ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(std::min(batch_timeout_s_, kMaxTimeoutS)))
                           : Clock::time_point::max();
  while (batch.answered < batch.size()) {
    if (!pump(batch)) fail_exited(batch);
  }
  // Lines already here beyond the last expected one (later ones are caught by the next call's check_idle). EOF
  // here is left for the next call too: every request was answered.
  if (read_waiting()) take_lines(batch);
  if (!out_.empty()) {
    const size_t n = batch.size();
    fail("more answer lines than requests: after answering " + batch.named(n - 1) + " it printed " +
         quote_answer(first_line(out_)));
  }
}

}  // namespace ppo
