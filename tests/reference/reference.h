// The reference environment for [ref] tests: the Python of .venv-ref with Hugging Face transformers, tokenizers and
// tensorboard, and the files under .ref/, both made by scripts/install-deps.sh. CMake writes their paths into the
// build (tests/paths.h) when the environment exists and registers the [ref] tests only then.
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/paths.h"

namespace ppo_test {

inline std::string ref_python() {
  if (paths().ref_python.empty()) {
    FAIL("built without a reference environment (scripts/install-deps.sh makes .venv-ref, then re-run cmake)");
  }
  return paths().ref_python;
}

// A file or folder under .ref/; fails the test, naming the script that makes it, when absent.
inline std::string ref_path(const std::string& sub) {
  if (paths().ref_dir.empty()) {
    FAIL("built without a reference environment (scripts/install-deps.sh makes .ref/, then re-run cmake)");
  }
  const std::string path = paths().ref_dir + "/" + sub;
  INFO(path << " is made by scripts/install-deps.sh");
  REQUIRE(std::filesystem::exists(path));
  return path;
}

// Runs `python tests/reference/<script> <args>` offline (no model hub); requires exit status 0. Its PyTorch runs on
// one thread (OMP_NUM_THREADS, set by tests/main.cpp).
inline void run_reference(const std::string& script, const std::string& args) {
  const std::string command =
      "HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error \"" +
      ref_python() + "\" \"" + ppo_test::paths().source_dir + "/tests/reference/" + script + "\" " + args;
  INFO(command);
  REQUIRE(std::system(command.c_str()) == 0);
}

}  // namespace ppo_test
