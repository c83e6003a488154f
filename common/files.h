// Files written so that a full disk, a failed write or a kill never leaves a damaged file behind unnoticed: every
// write is checked (an IoError names the file and the reason), a replaced file is written beside it and renamed
// over it, and checkpoint folders carry a manifest of sizes and checksums that loading verifies.
#pragma once

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace ppo {

// A failed write, flush, rename or sync: exit status 1 (the input was fine; the machine failed).
struct IoError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An open file that every write checks: the writes land in order and close() (or the destructor, which cannot
// throw) makes them durable with fsync.
class CheckedFile {
 public:
  // mode "w" (truncate) or "a" (append); an unopenable file is an IoError.
  CheckedFile(const std::string& path, const char* mode);
  ~CheckedFile();
  CheckedFile(const CheckedFile&) = delete;
  CheckedFile& operator=(const CheckedFile&) = delete;
  void write(const void* data, size_t bytes);
  void write(const std::string& text) { write(text.data(), text.size()); }
  void flush();  // to the kernel; an IoError when that fails (a full disk shows here at the latest)
  void close();  // flush, fsync, close
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// Writes `contents` to path + ".tmp", makes it durable, and renames it over `path`: a reader sees the old file or
// the new one, never a part.
void write_file_atomic(const std::string& path, const std::string& contents);

// Appends `text` to `path` (created if missing), checked and flushed; when that fails, the file is cut back to its
// old length (no line cut short is left behind) and an IoError is thrown.
void append_file(const std::string& path, const std::string& text);

// Checkpoint manifests: `dir`/manifest.json lists every other file under `dir` (relative path, size in bytes,
// XXH3-128 checksum as hex).
void write_manifest(const std::string& dir);
// When the folder holding `file` has a manifest, checks `file`'s size and checksum against it: a difference, or a
// file the manifest does not list, is a UsageError naming the file (a damaged checkpoint). No manifest: nothing
// to check (checkpoints written before manifests existed).
void verify_manifest_entry(const std::string& file);
// Verifies every file the manifest of `dir` lists.
void verify_manifest(const std::string& dir);

}  // namespace ppo
