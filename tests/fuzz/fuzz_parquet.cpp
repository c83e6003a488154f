// libFuzzer target for the Parquet reader (tasks/parquet.cpp, Apache Arrow's C++ reader of the pyarrow wheel): the
// input is a Parquet file. Its rows are read by for_each_parquet_record and turned into samples as load_samples does
// for every registered task (veRL's layout or the task's own), which must succeed or throw ppo::UsageError. The records
// read are then written back by write_parquet, which may refuse them with a UsageError (a field of no Parquet type);
// written, they must read back as the same JSON. Any other exception, crash, sanitizer report or failed check is a bug.
// Built and run by scripts/fuzz.sh (`bash scripts/fuzz.sh build 30 parquet`); its seeds are files pandas, datasets,
// pyarrow and ppo wrote (tests/fuzz/parquet/).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "tasks/datasets.h"
#include "tasks/parquet.h"
#include "tasks/task.h"
#include "tasks/verl_record.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

[[noreturn]] void finding(const std::string& what) {
  ppo_fuzz::finding("fuzz_parquet", what);
}

std::vector<nlohmann::json> read_records(const std::string& path) {
  std::vector<nlohmann::json> records;
  ppo::for_each_parquet_record(path, [&](const nlohmann::json& record, int64_t row) {
    if (row != static_cast<int64_t>(records.size())) finding("rows out of order");
    records.push_back(record);
  });
  return records;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::unique_ptr<ppo::Task>> tasks = [] {
    std::vector<std::unique_ptr<ppo::Task>> made;
    for (const std::string& name : ppo::task_names()) made.push_back(ppo::make_task(name));
    return made;
  }();
  const std::string path = ppo_fuzz::file_with(0, std::string(reinterpret_cast<const char*>(data), size));
  std::vector<nlohmann::json> records;
  try {
    records = read_records(path);
  } catch (const ppo::UsageError&) {
    return 0;
  }
  for (const auto& task : tasks) {
    for (const nlohmann::json& record : records) {
      try {
        if (ppo::is_verl_record(record))
          ppo::verl_sample(record, "prompt");
        else
          task->from_json(record);
      } catch (const ppo::UsageError&) {
      } catch (const nlohmann::json::exception&) {  // load_samples turns these into a UsageError naming the row
      }
    }
  }
  if (records.empty()) return 0;
  const std::string written = ppo_fuzz::file_with(1, "");
  try {
    ppo::write_parquet(records, written);
  } catch (const ppo::UsageError&) {
    return 0;
  }
  std::vector<nlohmann::json> again;
  try {
    again = read_records(written);
  } catch (const ppo::UsageError& e) {
    finding(std::string("a file write_parquet wrote does not read back: ") + e.what());
  }
  if (again.size() != records.size()) finding("write_parquet -> read changed the row count");
  for (size_t i = 0; i < records.size(); ++i)
    if (again[i] != records[i])
      finding("row " + std::to_string(i) + " read back as " + again[i].dump().substr(0, 300) + " instead of " +
              records[i].dump().substr(0, 300));
  return 0;
}
