#include "common/files.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <vector>

#include "common/error.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace fs = std::filesystem;

namespace ppo {

namespace {

[[noreturn]] void io_failure(const std::string& what, const std::string& path, int error) {
  throw IoError("cannot " + what + " " + path + ": " + std::strerror(error) +
                (error == ENOSPC ? " (the disk is full; free space and resume from the last checkpoint)" : ""));
}

void sync_directory(const std::string& path) {
  const std::string dir = fs::path(path).parent_path().string();
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // best effort: the rename itself is atomic
  ::fsync(fd);
  ::close(fd);
}

// What a non-regular file is, for the error naming it.
std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "something other";
}

// `path` opened for reading, checked to be a regular file on the descriptor itself. O_NONBLOCK so that opening a
// FIFO does not wait for a writer; cleared before reading.
int open_regular(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    throw UsageError(
        path + ": " +
        (error == ENOENT ? std::string("no such file") : "cannot open (" + std::string(std::strerror(error)) + ")"));
  }
  struct stat st {};
  const bool stated = ::fstat(fd, &st) == 0;
  if (!stated || !S_ISREG(st.st_mode)) {
    const std::string kind = stated ? kind_of(st.st_mode) : "not a regular file";
    ::close(fd);
    throw UsageError(path + ": is " + kind + ", not a regular file");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace

FileDigest file_digest(const std::string& path) {
  std::FILE* f = ::fdopen(open_regular(path), "rb");
  if (!f) io_failure("read", path, errno);
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  std::vector<char> buffer(1 << 20);
  FileDigest d;
  for (size_t n; (n = std::fread(buffer.data(), 1, buffer.size(), f)) > 0;) {
    XXH3_128bits_update(state, buffer.data(), n);
    d.bytes += n;
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(state));
  XXH3_freeState(state);
  if (failed) io_failure("read", path, EIO);
  static const char* hex = "0123456789abcdef";
  for (unsigned char byte : canonical.digest) d.xxh3_128 += {hex[byte >> 4], hex[byte & 15]};
  return d;
}

std::string file_fingerprint(const std::string& path) {
  std::error_code error;
  if (!fs::exists(path, error)) return "missing";
  const FileDigest d = file_digest(path);
  return std::to_string(d.bytes) + " bytes, xxh3 " + d.xxh3_128;
}

void check_regular_file(const std::string& path) {
  ::close(open_regular(path));
}

std::string read_regular_file(const std::string& path) {
  const int fd = open_regular(path);
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      io_failure("read", path, error);
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

CheckedFile::CheckedFile(const std::string& path, const char* mode) : path_(path) {
  file_ = std::fopen(path.c_str(), mode);
  if (!file_) io_failure("open", path, errno);
}

CheckedFile::~CheckedFile() {
  if (file_) std::fclose(file_);
}

void CheckedFile::write(const void* data, size_t bytes) {
  if (bytes > 0 && std::fwrite(data, 1, bytes, file_) != bytes) io_failure("write", path_, errno);
}

void CheckedFile::flush() {
  if (std::fflush(file_) != 0) io_failure("write", path_, errno);
}

void CheckedFile::close() {
  flush();
  if (::fsync(::fileno(file_)) != 0) io_failure("sync", path_, errno);
  std::FILE* f = file_;
  file_ = nullptr;
  if (std::fclose(f) != 0) io_failure("close", path_, errno);
}

namespace {

// path + ".tmp-XXXXXX" with a fresh random suffix, created by `create` (false when the name exists: try another).
// Not mkstemp and mkdtemp: they make files 0600 and folders 0700, where the umask should decide, as for every other
// file of a run.
std::string make_unique(const std::string& path, const std::function<bool(const std::string&)>& create) {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device random;
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string name = path + ".tmp-";
    for (int i = 0; i < 6; ++i) name += kChars[random() % (sizeof(kChars) - 1)];
    if (create(name)) return name;
  }
  io_failure("create a temporary file beside", path, EEXIST);
}

}  // namespace

std::string make_temp_file(const std::string& path) {
  return make_unique(path, [&](const std::string& name) {
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) io_failure("create a temporary file beside", path, errno);
    if (fd >= 0) ::close(fd);
    return fd >= 0;
  });
}

std::string make_temp_dir(const std::string& path) {
  return make_unique(path, [&](const std::string& name) {
    const bool made = ::mkdir(name.c_str(), 0777) == 0;
    if (!made && errno != EEXIST) io_failure("create a temporary folder beside", path, errno);
    return made;
  });
}

namespace {
// nftw's callback: the entries come depth first (FTW_DEPTH), so a folder is removed after its contents.
int remove_entry(const char* path, const struct stat*, int type, struct FTW*) {
  const int status = type == FTW_DP ? ::rmdir(path) : ::unlink(path);
  return status == 0 || errno == ENOENT ? 0 : errno;
}
}  // namespace

bool remove_tree(const std::string& path, std::error_code& error) noexcept {
  error.clear();
  struct stat info;
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return true;
    error = std::error_code(errno, std::generic_category());
    return false;
  }
  if (!S_ISDIR(info.st_mode)) {
    if (::unlink(path.c_str()) == 0 || errno == ENOENT) return true;
    error = std::error_code(errno, std::generic_category());
    return false;
  }
  errno = 0;
  const int status = ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  if (status == 0) return true;
  error = std::error_code(status > 0 ? status : (errno ? errno : EIO), std::generic_category());
  return false;
}

void remove_tree(const std::string& path) {
  std::error_code error;
  if (!remove_tree(path, error)) io_failure("remove", path, error.value());
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  const std::string tmp = make_temp_file(path);
  try {
    CheckedFile out(tmp, "w");
    out.write(contents);
    out.close();
  } catch (const IoError&) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) io_failure("rename " + tmp + " to", path, errno);
  sync_directory(path);
}

void append_file(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) io_failure("open", path, errno);
  const off_t before = ::lseek(fd, 0, SEEK_END);
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : ENOSPC;
      [[maybe_unused]] const int cut = ::ftruncate(fd, before);  // leave no line cut short behind
      ::close(fd);
      io_failure("write", path, error);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) io_failure("close", path, errno);
}

}  // namespace ppo
