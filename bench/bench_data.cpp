// Reading a data file as training does (load_samples: every row to its JSON record, then to a sample), timed, with
// the process's memory: the Parquet reader against the JSONL one on the same records, and against pandas
// (bench/parquet_read.py pandas) on the same file.
//
//   bench_data FILE [--repeat K] [--task NAME]
//
// Prints one JSON line: rows, the best of K reads in seconds, rows/s, the resident memory before the first read, its
// peak during the first read (getrusage's ru_maxrss) and the growth, all in MiB: the samples kept plus what the reader
// holds while reading.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "tasks/datasets.h"
#include "tasks/task.h"

namespace {

double resident_mib() {  // /proc/self/statm's second field: resident pages
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * 4096.0 / (1 << 20);
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, task_name = "reverse";
  int repeat = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--repeat" && i + 1 < argc)
      repeat = std::stoi(argv[++i]);
    else if (arg == "--task" && i + 1 < argc)
      task_name = argv[++i];
    else
      path = arg;
  }
  if (path.empty()) {
    std::fprintf(stderr, "usage: bench_data FILE [--repeat K] [--task NAME]\n");
    return 2;
  }
  try {
    const auto task = ppo::make_task(task_name);
    const double before = resident_mib();
    double best = 1e30, peak = 0;
    size_t rows = 0;
    for (int r = 0; r < repeat; ++r) {
      const auto start = std::chrono::steady_clock::now();
      const std::vector<ppo::TaskSample> samples = ppo::load_samples(*task, path);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      rows = samples.size();
      if (r == 0) {  // the first read's peak: later ones add the allocators' leftovers
        rusage usage{};
        getrusage(RUSAGE_SELF, &usage);
        peak = static_cast<double>(usage.ru_maxrss) / 1024.0;
      }
    }
    std::printf(
        "{\"impl\": \"ppo.cpp\", \"file\": \"%s\", \"rows\": %zu, \"seconds\": %.4f, \"rows_per_s\": %.0f, "
        "\"rss_before_mib\": %.1f, \"peak_rss_mib\": %.1f, \"rss_growth_mib\": %.1f}\n",
        path.c_str(), rows, best, static_cast<double>(rows) / best, before, peak, peak - before);
  } catch (const ppo::UsageError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
