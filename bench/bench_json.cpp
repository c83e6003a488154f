// The bounded JSON reader (common/json.h) against nlohmann's plain parse of the same text, on model.safetensors
// headers of N empty tensors, N = 10^3 .. 10^6 (a 10^6 header is ~77 MB, under the reader's 100 MB bound), and
// load_safetensors on the whole file (the header's checks included), which every checkpoint and model folder goes
// through.
//
//   bench_json [--max N]
//
// Prints one JSON line per N: entries, header MB, and the best of 3 in seconds of nlohmann::json::parse,
// parse_json_bounded, load_safetensors and (up to 10^4 entries) nlohmann's parse with a callback.
#include <stdlib.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>

#include "common/files.h"
#include "common/json.h"
#include "model/safetensors.h"

namespace {

std::string header_of(int64_t entries) {
  nlohmann::json header = nlohmann::json::object();
  for (int64_t i = 0; i < entries; ++i)
    header["t" + std::to_string(i)] = {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {0, 0}}};
  return header.dump();
}

double best_of_3(const std::function<void()>& f) {
  double best = 1e300;
  for (int k = 0; k < 3; ++k) {
    const auto start = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t max = 1000000;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--max") == 0) max = std::stoll(argv[i + 1]);
  char dir_template[] = "/tmp/bench_json.XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (!dir) return 1;
  const std::string path = std::string(dir) + "/model.safetensors";
  for (int64_t n = 1000; n <= max; n *= 10) {
    const std::string text = header_of(n);
    {
      std::ofstream out(path, std::ios::binary);
      const uint64_t size = text.size();
      for (int b = 0; b < 8; ++b) out.put(static_cast<char>((size >> (8 * b)) & 0xFF));
      out << text;
    }
    const double plain = best_of_3([&] { return nlohmann::json::parse(text).size(); });
    const double bounded = best_of_3([&] { (void)ppo::parse_json_bounded(text); });
    const double load = best_of_3([&] { (void)ppo::load_safetensors(path); });
    // nlohmann's parse with a callback (a depth bound's obvious form) rescans a container as each value in it
    // closes: quadratic, so timed up to 10^4 entries only.
    const auto keep = [](int, nlohmann::json::parse_event_t, nlohmann::json&) { return true; };
    const double callback = n <= 10000 ? best_of_3([&] { return nlohmann::json::parse(text, keep).size(); }) : -1;
    std::printf("%s\n", nlohmann::json{{"entries", n},
                                       {"header_mb", static_cast<double>(text.size()) / 1e6},
                                       {"nlohmann_parse_s", plain},
                                       {"parse_json_bounded_s", bounded},
                                       {"load_safetensors_s", load},
                                       {"nlohmann_callback_parse_s",
                                        callback < 0 ? nlohmann::json() : nlohmann::json(callback)}}
                            .dump()
                            .c_str());
    std::fflush(stdout);
  }
  ppo::remove_tree(dir);
  return 0;
}
