// A fresh folder under the system temp dir for one test, removed at scope exit.
#pragma once

#include <filesystem>
#include <random>
#include <string>
#include <system_error>

#include "common/files.h"

namespace ppo_test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& stem = "ppo_test") {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() / (stem + "_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    ppo::remove_tree(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // The path of `name` inside the folder (not created).
  std::string sub(const std::string& name) const { return (path / name).string(); }
};

// Whether a temporary of `path` is left beside it: an entry named path + ".tmp..." (common/files.h make_temp_file,
// make_temp_dir).
inline bool temporary_left_beside(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string prefix = p.filename().string() + ".tmp";
  std::error_code error;
  for (std::filesystem::directory_iterator it(p.parent_path(), error), end; !error && it != end; it.increment(error))
    if (it->path().filename().string().rfind(prefix, 0) == 0) return true;
  return false;
}

}  // namespace ppo_test
