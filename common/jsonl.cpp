#include "common/jsonl.h"

#include <fstream>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/strings.h"

namespace ppo {

void for_each_jsonl_record(const std::string& path,
                           const std::function<void(const nlohmann::json&, int64_t)>& on_record) {
  check_regular_file(path);
  std::ifstream in(path);
  usage_check(in.good(), path + ": cannot open for reading");
  std::string line;
  int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (trim(line).empty()) continue;
    const std::string where = path + ":" + std::to_string(line_number) + ": ";
    nlohmann::json record;
    try {
      record = parse_json_bounded(line);
    } catch (const nlohmann::json::exception& e) {
      throw UsageError(where + "invalid JSON: " + e.what());
    } catch (const UsageError& e) {
      throw UsageError(where + e.what());
    }
    try {
      on_record(record, line_number);
    } catch (const UsageError& e) {
      throw UsageError(where + e.what());
    } catch (const nlohmann::json::exception& e) {
      throw UsageError(where + e.what());
    }
  }
  usage_check(!in.bad(), path + ": read error");
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> records;
  for_each_jsonl_record(path, [&](const nlohmann::json& record, int64_t) { records.push_back(record); });
  return records;
}

}  // namespace ppo
