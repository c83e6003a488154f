// A file's whole contents in and out, for tests (binary: no newline translation).
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace ppo_test {

// The bytes of `path`; "" when it cannot be read.
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Replaces `path` with `text`.
inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

}  // namespace ppo_test
