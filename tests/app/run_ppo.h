// Runs the `ppo` binary (tests/paths.h) through the shell for the CLI tests; stdout and stderr together.
#pragma once

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <sstream>
#include <string>

#include "tests/paths.h"

namespace ppo_test {

// The tiny config (configs/regression_tiny.yaml) on one thread, as the CLI tests run it before their own overrides.
inline const std::string kTinyOneThread =
    "--config " + ppo_test::paths().source_dir + "/configs/regression_tiny.yaml trainer.num_threads=1 ";

struct Result {
  int status;  // exit status, -1 when the command did not exit normally
  std::string output;
};

// `args` is shell text: redirections such as "< in.jsonl" are allowed. With `timeout_s` > 0 the command is killed
// after that many seconds (exit status 137): a test of a hang fails instead of holding up the suite. With `cwd` it
// runs in that folder; `environment` ("NAME=value ...") is set for it alone.
inline Result run_ppo(const std::string& args, int timeout_s = 0, const std::string& cwd = "",
                      const std::string& environment = "") {
  std::string command =
      (environment.empty() ? "" : "env " + environment + " ") + ppo_test::paths().ppo_binary + " " + args + " 2>&1";
  if (timeout_s > 0) command = "timeout -s KILL " + std::to_string(timeout_s) + " " + command;
  if (!cwd.empty()) command = "cd '" + cwd + "' && " + command;
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  char buffer[4096];
  while (pipe && fgets(buffer, sizeof(buffer), pipe)) output += buffer;
  int status = pipe ? pclose(pipe) : -1;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

// Lines of `s` that start with `prefix`.
inline int count_lines(const std::string& s, const std::string& prefix) {
  int n = 0;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) n += line.rfind(prefix, 0) == 0;
  return n;
}

// Exit `status` (2: bad input; 1: a run that cannot go on) with one `error:` line containing `expected`, and no
// LibTorch backtrace.
inline void check_one_error(const Result& r, const std::string& expected, int status = 2) {
  INFO(r.output);
  CHECK(r.status == status);
  CHECK(count_lines(r.output, "error: ") == 1);
  CHECK_THAT(r.output, Catch::Contains(expected));
  CHECK_THAT(r.output, !Catch::Contains("Exception raised from") && !Catch::Contains("frame #"));
}

}  // namespace ppo_test
