// What the libFuzzer targets of tests/fuzz/fuzz_*.cpp share: reporting a finding, handing an input to a reader that
// takes a path, and building documents nested deeper than libFuzzer's input length allows.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "common/files.h"

namespace ppo_fuzz {

[[noreturn]] inline void finding(const char* target, const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", target, what.c_str());
  std::abort();
}

// A file holding `text`, for readers that take a path: one memfd per slot and process, rewritten for every input,
// reached as /proc/self/fd/N (no disk, nothing left behind; a memfd is a regular file).
inline std::string file_with(int slot, const std::string& text) {
  static int fds[4] = {-1, -1, -1, -1};
  int& fd = fds[slot];
  if (fd < 0) fd = memfd_create("ppo_fuzz", 0);
  if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    finding("ppo_fuzz", "cannot write the input to a memfd");
  return "/proc/self/fd/" + std::to_string(fd);
}

// A folder of this process, for readers that take a folder: under the system's temporary folder, named by the target
// and the process id, removed at exit.
struct ProcessFolder {
  std::string path;
  explicit ProcessFolder(const std::string& target)
      : path((std::filesystem::temp_directory_path() / ("ppo_" + target + "_" + std::to_string(::getpid()))).string()) {
    std::filesystem::create_directories(path);
  }
  ~ProcessFolder() {
    std::error_code ignored;
    ppo::remove_tree(path, ignored);
  }
  ProcessFolder(const ProcessFolder&) = delete;
  ProcessFolder& operator=(const ProcessFolder&) = delete;
};

// Structure-aware deep nesting for the JSON targets. An input that starts with the byte 0xFE is a recipe: the next
// three bytes are a depth d (little-endian, at most 2^18), the next byte picks the nesting (even: [[[...]]], odd:
// {"a": {"a": ...}}), and the rest is a JSON text in which the first "@@" (or, without one, the value of a key "x"
// appended to the object) becomes that nested value. So the fuzzer reaches documents 200,000 levels deep, which its
// -max_len could never spell out. Any other input is used as it is.
inline std::string expand_deep(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  if (size < 5 || data[0] != 0xFE) return input;
  const size_t depth = (data[1] | data[2] << 8 | data[3] << 16) & ((1u << 18) - 1);
  const bool arrays = data[4] % 2 == 0;
  std::string nested;
  nested.reserve(depth * (arrays ? 2 : 8) + 2);
  for (size_t i = 0; i < depth; ++i) nested += arrays ? "[" : "{\"a\": ";
  nested += "1";
  for (size_t i = 0; i < depth; ++i) nested += arrays ? "]" : "}";
  std::string text = input.substr(5);
  const size_t marker = text.find("@@");
  if (marker != std::string::npos) return text.replace(marker, 2, nested);
  const size_t close = text.rfind('}');
  if (close == std::string::npos) return "{\"x\": " + nested + "}";
  return text.substr(0, close) + (text.find(':') != std::string::npos ? ", " : "") + "\"x\": " + nested +
         text.substr(close);
}

}  // namespace ppo_fuzz
