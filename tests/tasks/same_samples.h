// Checks that samples read back (load_samples) equal the ones written, field by field.
#pragma once

#include <catch2/catch.hpp>

#include <vector>

#include "tasks/task.h"

namespace ppo_test {

inline void require_same_samples(const std::vector<ppo::TaskSample>& loaded,
                                 const std::vector<ppo::TaskSample>& samples) {
  REQUIRE(loaded.size() == samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    INFO("sample " << i);
    CHECK(loaded[i].prompt == samples[i].prompt);
    CHECK(loaded[i].answer == samples[i].answer);
    CHECK(loaded[i].ground_truth == samples[i].ground_truth);
    CHECK(loaded[i].difficulty == samples[i].difficulty);
    CHECK(loaded[i].index == samples[i].index);
  }
}

}  // namespace ppo_test
