// See records/tracker.h.
#include "records/tracker.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "common/error.h"
#include "common/files.h"

extern char** environ;

namespace ppo {
namespace {

namespace fs = std::filesystem;

// The folder of the running program (build/ or an install's bin/), or "" when /proc/self/exe cannot be read.
fs::path program_folder() {
  std::error_code error;
  const fs::path exe = fs::read_symlink("/proc/self/exe", error);
  return error ? fs::path() : exe.parent_path();
}

// The last non-empty line of a companion's log, for a warning.
std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last.empty() ? "no output" : last.substr(0, 300);
}

// `argv` started with stdin from /dev/null and its output appended to `log` (or ours, when `log` is empty), in a
// process group of its own (a Ctrl-C to the trainer's group leaves it to close the tracked run). posix_spawn, not
// fork: the trainer runs under MPI. Returns the pid, or -1 with the reason in `why`.
pid_t spawn_logged(const std::vector<std::string>& argv, const std::string& log, std::string& why) {
  const int out = log.empty() ? -1 : ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (!log.empty() && out < 0) {
    why = "cannot open " + log + ": " + std::strerror(errno);
    return -1;
  }
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  if (out >= 0) {
    posix_spawn_file_actions_adddup2(&actions, out, STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out, STDERR_FILENO);
  }
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  std::vector<std::string> args = argv;
  std::vector<char*> pointers;
  for (std::string& a : args) pointers.push_back(a.data());
  pointers.push_back(nullptr);
  pid_t pid = -1;
  const int error = posix_spawnp(&pid, args[0].c_str(), &actions, &attr, pointers.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (out >= 0) ::close(out);
  if (error != 0) why = "cannot start " + args[0] + ": " + std::strerror(error);
  return error == 0 ? pid : -1;
}

// The Python and the script a companion runs: $PPO_TRACK_PYTHON, else the tracking environment beside the build
// (<ppo>/../.venv-track/bin/python), else python3; scripts/ppo_track.py of the source tree or share/ppo/ of an
// install. `script` is empty when neither exists.
struct TrackerProgram {
  std::string python, script;
};

TrackerProgram tracker_program() {
  TrackerProgram program;
  const fs::path folder = program_folder();
  const char* python = std::getenv("PPO_TRACK_PYTHON");
  if (python && *python)
    program.python = python;
  else if (!folder.empty() && fs::exists(folder / "../.venv-track/bin/python"))
    program.python = (folder / "../.venv-track/bin/python").lexically_normal().string();
  else
    program.python = "python3";
  for (const char* place : {"../scripts/ppo_track.py", "../share/ppo/ppo_track.py"})
    if (!folder.empty() && fs::is_regular_file(folder / place)) {
      program.script = (folder / place).lexically_normal().string();
      break;
    }
  return program;
}

// The companion's arguments for `tracker` over `run_dir` (python first); `once`: log what the folder holds and close
// the run (ppo track), else follow it until the trainer (`parent`) ends.
std::vector<std::string> tracker_command(const TrackerProgram& program, const std::string& tracker,
                                         const std::string& run_dir, const TrainerConfig& trainer, bool once,
                                         pid_t parent) {
  std::vector<std::string> argv = {program.python, program.script, "--to",      tracker,
                                   "--run-dir",    run_dir,        "--project", trainer.project_name};
  if (!trainer.experiment_name.empty()) argv.insert(argv.end(), {"--name", trainer.experiment_name});
  if (once)
    argv.push_back("--once");
  else
    argv.insert(argv.end(), {"--parent", std::to_string(parent)});
  return argv;
}

// Why there is no companion to run.
std::string missing_script() {
  return "scripts/ppo_track.py is neither beside " + program_folder().string() + "/.. nor in share/ppo/";
}

}  // namespace

const std::vector<std::string>& tracker_names() {
  static const std::vector<std::string> names = {"wandb", "mlflow"};
  return names;
}

int track_once(const TrainerConfig& trainer, const std::string& tracker, const std::string& run_dir) {
  const TrackerProgram program = tracker_program();
  usage_check(!program.script.empty(), "ppo track: " + missing_script());
  std::string why;
  const pid_t pid = spawn_logged(tracker_command(program, tracker, run_dir, trainer, /*once=*/true, 0), "", why);
  usage_check(pid > 0, "ppo track: " + why +
                           " (bash scripts/install-deps.sh makes .venv-track; PPO_TRACK_PYTHON "
                           "names another Python with the tracker's client)");
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

Trackers::Trackers(const TrainerConfig& trainer, const std::string& run_dir, bool is_root) : run_dir_(run_dir) {
  if (!is_root) return;
  const TrackerProgram program = tracker_program();
  for (const std::string& name : tracker_names()) {
    if (std::find(trainer.logger.begin(), trainer.logger.end(), name) == trainer.logger.end()) continue;
    std::string why;
    pid_t pid = -1;
    try {
      fs::create_directories(run_dir + "/tracking");
      fs::remove(run_dir + "/tracking/trainer_exit");  // an earlier part of a resumed run ended there
      fs::remove(run_dir + "/tracking/" + name + ".closed");
      if (program.script.empty())
        why = missing_script();
      else
        pid = spawn_logged(tracker_command(program, name, run_dir, trainer, /*once=*/false, ::getpid()),
                           run_dir + "/tracking/" + name + ".log", why);
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (pid < 0) {
      std::cerr << "warning: trainer.logger " << name << ": the tracker did not start (" << why
                << "); metrics.jsonl stays the record, and `ppo track --to " << name << " " << run_dir
                << "` logs it later\n";
      continue;
    }
    companions_.push_back({name, pid});
  }
}

void Trackers::check() {
  for (Companion& c : companions_) {
    if (c.pid < 0) continue;
    int status = 0;
    if (::waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
    c.pid = -1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    std::cerr << "warning: trainer.logger " << c.name << ": the tracker stopped ("
              << last_line(run_dir_ + "/tracking/" + c.name + ".log") << "); training goes on, metrics.jsonl "
              << "stays the record, and `ppo track --to " << c.name << " " << run_dir_ << "` logs the rest later\n";
  }
}

Trackers::~Trackers() {
  if (companions_.empty()) return;
  try {
    write_file_atomic(run_dir_ + "/tracking/trainer_exit", std::uncaught_exceptions() > 0 ? "1\n" : "0\n");
  } catch (...) {  // the companions then see the trainer gone, and close the run as killed
  }
  for (Companion& c : companions_)
    if (c.pid > 0) ::waitpid(c.pid, nullptr, WNOHANG);
}

}  // namespace ppo
