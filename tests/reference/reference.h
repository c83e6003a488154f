// The reference environment for [ref] tests: the Python of .venv-ref (PPO_REF_PYTHON) with Hugging Face transformers,
// tokenizers and tensorboard, and the files under .ref/ (PPO_REF_DIR), both made by scripts/install-deps.sh. CMake
// compiles their paths in when the environment exists and registers the [ref] tests only then.
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ppo_test {

inline std::string ref_python() {
#ifdef PPO_REF_PYTHON
  return PPO_REF_PYTHON;
#else
  FAIL("built without a reference environment (scripts/install-deps.sh makes .venv-ref, then re-run cmake)");
  return "";
#endif
}

// A file or folder under .ref/; fails the test, naming the script that makes it, when absent.
inline std::string ref_path(const std::string& sub) {
#ifdef PPO_REF_DIR
  const std::string path = std::string(PPO_REF_DIR) + "/" + sub;
#else
  const std::string path = sub;
  FAIL("built without a reference environment (scripts/install-deps.sh makes .ref/, then re-run cmake)");
#endif
  INFO(path << " is made by scripts/install-deps.sh");
  REQUIRE(std::filesystem::exists(path));
  return path;
}

// Runs `python tests/reference/<script> <args>` offline (no model hub); requires exit status 0.
inline void run_reference(const std::string& script, const std::string& args) {
  const std::string command =
      "HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error \"" +
      ref_python() + "\" \"" PPO_SOURCE_DIR "/tests/reference/" + script + "\" " + args;
  INFO(command);
  REQUIRE(std::system(command.c_str()) == 0);
}

}  // namespace ppo_test
