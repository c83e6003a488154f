// JSONL files: one JSON value per line. Every JSONL file ppo.cpp or its tests read (data records, `ppo score`'s
// responses, metrics.jsonl) goes through for_each_jsonl_record.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ppo {

// Calls on_record(record, line_number) for every non-blank line of a JSONL file, each parsed with
// parse_json_bounded (common/json.h); an error inside (UsageError or a json exception) becomes "path:line: problem",
// an unreadable file "path: cannot open for reading".
void for_each_jsonl_record(const std::string& path,
                           const std::function<void(const nlohmann::json&, int64_t)>& on_record);

// Every record of a JSONL file, in order (metrics.jsonl and the like); errors as for_each_jsonl_record's.
std::vector<nlohmann::json> read_jsonl(const std::string& path);

}  // namespace ppo
