// Files written so that a full disk, a failed write or a kill never leaves a damaged file behind unnoticed: every
// write is checked (an IoError names the file and the reason), a replaced file is written beside it and renamed
// over it, and every file's size and checksum can be read (common/manifest.h lists them for checkpoint folders).
#pragma once

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <system_error>

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

// Every file ppo.cpp reads is a regular file. A FIFO would block the read forever, a device could be endless, a
// folder reads as nothing: each is a UsageError naming the path and what it is, as is a missing file.
// The check alone, for files that another library opens (LibTorch archives):
void check_regular_file(const std::string& path);
// The whole contents of a regular file (checked on the opened descriptor, so nothing can swap the file in between);
// a read that fails midway is an IoError.
std::string read_regular_file(const std::string& path);

// A new empty file, or folder, beside `path`, named path + ".tmp-XXXXXX" with a unique suffix (mkstemp, mkdtemp):
// never a name that already exists, so nothing of the user's is overwritten or removed with it. IoError on failure.
std::string make_temp_file(const std::string& path);
std::string make_temp_dir(const std::string& path);

// Removes `path` and, when it is a folder, everything under it, never following a symbolic link (a link is removed,
// not what it points to); a missing path is no error. Returns false and sets `error` when something could not be
// removed. Used in place of std::filesystem::remove_all: PyPI's LibTorch 2.x exports its own copy of that function,
// which the dynamic linker can bind our calls to, and that copy jumped to address 0 on a CUDA machine (GCC 13).
bool remove_tree(const std::string& path, std::error_code& error) noexcept;
// The same, an IoError naming the path when something could not be removed.
void remove_tree(const std::string& path);

// A regular file's size and XXH3-128 checksum (32 hex digits); an IoError naming it when it cannot be read.
struct FileDigest {
  uint64_t bytes = 0;
  std::string xxh3_128;
};
FileDigest file_digest(const std::string& path);
// "<bytes> bytes, xxh3 <hex>" of a regular file, "missing" when there is none: what identifies a file's contents.
std::string file_fingerprint(const std::string& path);

// Writes `contents` to make_temp_file(path), makes it durable, and renames it over `path`: a reader sees the old
// file or the new one, never a part.
void write_file_atomic(const std::string& path, const std::string& contents);

// Appends `text` to `path` (created if missing), checked and flushed; when that fails, the file is cut back to its
// old length (no line cut short is left behind) and an IoError is thrown.
void append_file(const std::string& path, const std::string& text);

}  // namespace ppo
