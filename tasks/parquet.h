// Parquet data files, as veRL's and Logic-RL's preprocessing scripts write them with pandas or `datasets`, read and
// written with Apache Arrow's own C++ library (the pyarrow wheel's, CMakeLists.txt PPO_WITH_PARQUET).
//
// Reading turns every row into the JSON record a JSONL line would have held, column by column:
//   struct -> object (every field, a null one as null)     list, large_list, fixed_size_list -> array
//   string, large_string, dictionary of strings -> string   bool -> boolean
//   int8..int64, uint8..uint64 -> whole number              float, double -> number (NaN and infinities: null)
//   null (any type) -> null
// Any other type (binary, timestamp, decimal, map, ...) is an error naming the column and the type, checked on the
// schema before any row is read. Rows are decoded in batches of 8,192, page by page, and each row's JSON is dropped
// once on_record returns: memory holds one batch's Arrow arrays and the pages being decoded besides what the caller
// keeps of each record, however large the file and its row groups.
//
// Writing infers one Arrow type per field from all records (objects -> struct with every key seen, in order of first
// appearance; arrays -> list; whole numbers -> int64, widened to double beside fractional ones; strings; booleans;
// null where a record lacks a key) and writes snappy-compressed row groups of 65,536 rows, each page with its CRC. A
// field holding values of two kinds (a string in one record, a number in another) is an error naming it.
//
// Damage: the reader checks the footer, every page's header, its CRC where the writer stored one (ppo's files; pandas
// and pyarrow store none by default), decompression and the decoded arrays (offsets, UTF-8, dictionary indices). A
// changed byte that still decodes to valid values in a page without a CRC cannot be seen.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ppo {

// Whether this build reads and writes Parquet (PPO_WITH_PARQUET).
bool parquet_supported();
// Whether `path` names a Parquet file (it ends in ".parquet").
bool is_parquet_path(const std::string& path);

// Calls on_record(record, row) for every row, in order (row counts from 0, as pandas numbers them). Errors are
// UsageError: "path: not a Parquet file (...)", "path: column 'extra_info.when': type timestamp[ns] is not read ...",
// "path: row N: problem" for an error inside on_record or while decoding the row's row group, and, in a build without
// Parquet, "path: this build of ppo reads no Parquet ..." saying how to build one.
void for_each_parquet_record(const std::string& path,
                             const std::function<void(const nlohmann::json&, int64_t)>& on_record);

// Writes `records` (JSON objects) as one Parquet file. UsageError for a record that is not an object, a field of two
// kinds, an empty object (Parquet has no struct without fields) or a file that cannot be written.
void write_parquet(const std::vector<nlohmann::json>& records, const std::string& path);

}  // namespace ppo
