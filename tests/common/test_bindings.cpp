// Where the programs' C++ standard library calls bind at run time: to libstdc++, never to the copies that PyPI's
// LibTorch exports (its libtorch.so carries its own std::filesystem, and a call that reached it crashed).
#include <dlfcn.h>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/paths.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;

namespace {

struct Binding {
  std::string symbol, target;
};

std::string base_name(const std::string& path) {
  return fs::path(path).filename().string();
}

// Runs `program args` with the dynamic linker binding every reference at start-up (LD_BIND_NOW) and reporting each
// binding (LD_DEBUG=bindings) into files under `dir`, and returns those of `program`'s own references that carry
// libstdc++'s symbol versions (GLIBCXX_*, CXXABI_*). `preload`, when set, is loaded ahead of everything else.
std::vector<Binding> cxx_bindings(const std::string& program, const std::string& args, const std::string& dir,
                                  const std::string& preload = "") {
  const std::string log = dir + "/bind";
  const std::string command = "LD_BIND_NOW=1 LD_DEBUG=bindings LD_DEBUG_OUTPUT='" + log + "' " +
                              (preload.empty() ? "" : "LD_PRELOAD='" + preload + "' ") + "'" + program + "' " + args +
                              " >/dev/null 2>&1";
  REQUIRE(std::system(command.c_str()) == 0);
  const std::string from = "binding file " + program + " [0] to ";
  std::vector<Binding> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (base_name(entry.path().string()).rfind("bind.", 0) != 0) continue;
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) {
      const size_t at = line.find(from);
      if (at == std::string::npos) continue;
      const size_t target_end = line.find(" [", at + from.size()), open = line.find('`'), close = line.rfind('\'');
      const size_t version = line.rfind(" [");
      if (target_end == std::string::npos || open == std::string::npos || close <= open || version < close) continue;
      const std::string tag = line.substr(version + 2);
      if (tag.rfind("GLIBCXX_", 0) != 0 && tag.rfind("CXXABI_", 0) != 0) continue;
      found.push_back(
          {line.substr(open + 1, close - open - 1), line.substr(at + from.size(), target_end - at - from.size())});
    }
    fs::remove(entry.path());
  }
  return found;
}

// The bindings that land anywhere but libstdc++ or the program itself (a copy relocation of a vtable or typeinfo).
std::vector<Binding> foreign(const std::vector<Binding>& bindings, const std::string& program) {
  std::vector<Binding> out;
  for (const Binding& b : bindings)
    if (b.target != program && base_name(b.target).rfind("libstdc++.so", 0) != 0) out.push_back(b);
  return out;
}

// The libtorch.so this test program has loaded ("" if none by that name).
std::string loaded_libtorch() {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (base_name(path) == "libtorch.so" || base_name(path).rfind("libtorch.so.", 0) == 0) return path;
  }
  return "";
}

// Whether `library` defines std::filesystem::remove_all itself rather than taking libstdc++'s.
bool exports_own_filesystem(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  void* symbol = dlsym(handle, "_ZNSt10filesystem10remove_allERKNS_7__cxx114pathE");
  Dl_info info{};
  const bool own = symbol != nullptr && dladdr(symbol, &info) != 0 && info.dli_fname != nullptr &&
                   fs::equivalent(info.dli_fname, library);
  dlclose(handle);
  return own;
}

void check_program(const std::string& program, const std::string& args, const std::string& dir) {
  const std::vector<Binding> all = cxx_bindings(program, args, dir);
  size_t to_libstdcxx = 0;
  for (const Binding& b : all) to_libstdcxx += base_name(b.target).rfind("libstdc++.so", 0) == 0;
  const std::vector<Binding> stray = foreign(all, program);
  INFO(program << ": " << all.size() << " references with libstdc++'s versions, " << to_libstdcxx
               << " bound to libstdc++");
  for (const Binding& b : stray) UNSCOPED_INFO(b.symbol << " -> " << b.target);
  CHECK(to_libstdcxx > 50);  // the report was read: the programs make hundreds of such calls
  CHECK(stray.empty());
}

}  // namespace

TEST_CASE("ppo's and the test program's C++ library calls all bind to libstdc++, never to LibTorch's copies",
          "[cpu][files]") {
  ppo_test::TempDir tmp;
  check_program(ppo_test::paths().ppo_binary, "--help", tmp.path.string());
  check_program(fs::read_symlink("/proc/self/exe").string(), "-h", tmp.path.string());

  // The check finds such bindings where they exist: with LibTorch's libtorch.so loaded first, the std::filesystem
  // calls reach its copies (only a LibTorch that exports them, as PyPI's 2.x does; Debian's 1.13 does not).
  const std::string libtorch = loaded_libtorch();
  if (libtorch.empty() || !exports_own_filesystem(libtorch)) {
    WARN("this LibTorch's libtorch.so (" << (libtorch.empty() ? "not loaded" : libtorch)
                                         << ") exports no std::filesystem of its own: the control case does not apply");
    return;
  }
  const std::vector<Binding> stray = foreign(
      cxx_bindings(ppo_test::paths().ppo_binary, "--help", tmp.path.string(), libtorch), ppo_test::paths().ppo_binary);
  size_t filesystem = 0;
  for (const Binding& b : stray)
    filesystem += b.symbol.rfind("_ZNSt10filesystem", 0) == 0 && base_name(b.target) == base_name(libtorch);
  CHECK(filesystem > 5);
}
