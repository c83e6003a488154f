// Arrow's and Parquet's calls with their failures as UsageError, for tasks/parquet.cpp and tasks/parquet_writer.cpp
// (the only files that see Arrow's headers).
#pragma once

#include <arrow/api.h>

#include <exception>
#include <string>
#include <type_traits>
#include <utility>

#include "common/error.h"

namespace ppo {

// Runs an Arrow or Parquet call: a failed Status or Result, or an exception of the library (parquet::ParquetException
// for a damaged file), becomes UsageError(where + its message).
template <typename Call>
auto arrow_call(const std::string& where, Call&& call) {
  try {
    auto outcome = call();
    if constexpr (std::is_same_v<decltype(outcome), arrow::Status>) {
      if (!outcome.ok()) throw UsageError(where + outcome.message());
    } else {
      if (!outcome.ok()) throw UsageError(where + outcome.status().message());
      return std::move(outcome).ValueUnsafe();
    }
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(where + e.what());
  }
}

}  // namespace ppo
