// The message of the UsageError a call throws, for tests of error texts.
#pragma once

#include <string>

#include "common/error.h"

namespace ppo_test {

// Catches the UsageError `fn` throws and returns its message ("" when nothing was thrown).
template <typename Fn>
std::string usage_error_message(Fn fn) {
  try {
    fn();
  } catch (const ppo::UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace ppo_test
