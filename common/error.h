// Errors: library code throws; app/main.cpp catches, prints one `error:` line and picks the exit status.
#pragma once

#include <stdexcept>
#include <string>

namespace ppo {

// Bad usage, config, data, batch sizes or checkpoint: exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws UsageError when `ok` is false.
inline void usage_check(bool ok, const std::string& message) {
  if (!ok) throw UsageError(message);
}

}  // namespace ppo
