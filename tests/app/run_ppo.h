// Runs the `ppo` binary (PPO_BINARY) through the shell for the CLI tests; stdout and stderr together.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <sstream>
#include <string>

namespace ppo_test {

struct Result {
  int status;  // exit status, -1 when the command did not exit normally
  std::string output;
};

// `args` is shell text: redirections such as "< in.jsonl" are allowed.
inline Result run_ppo(const std::string& args) {
  std::string output;
  FILE* pipe = popen((std::string(PPO_BINARY) + " " + args + " 2>&1").c_str(), "r");
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

}  // namespace ppo_test
