// Where the tests find the source tree, the `ppo` binary, mpiexec and the reference environment: this build's paths.
// tests/CMakeLists.txt writes them into a generated header that tests/paths.cpp alone includes, so that a clone in
// another folder recompiles that one file and takes every other test object from the compiler cache.
#pragma once

#include <string>

namespace ppo_test {

struct Paths {
  std::string source_dir;  // the repository's root
  std::string ppo_binary;  // build/ppo (or the build folder's)
  std::string mpiexec;     // the mpiexec CMake found
  // The Python of the reference environment (.venv-ref) and the folder of its files (.ref/); empty in a build
  // without one (CMake then registers no [ref] test).
  std::string ref_python, ref_dir;
};

// Built on first use, so that the tests' own file-scope constants may call it before main().
const Paths& paths();

}  // namespace ppo_test
