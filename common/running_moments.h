// The running mean and variance of every value seen so far, merged a batch at a time (Chan, Golub and LeVeque's
// parallel update, as TRL's RunningMoments in trl/core.py): reward_model.normalize's statistics, kept in checkpoints.
#pragma once

#include <cmath>
#include <cstdint>

namespace ppo {

struct RunningMoments {
  int64_t count = 0;  // values seen
  double mean = 0.0;
  double var = 0.0;  // population variance (divided by count)

  // Merges a batch of `n` values with mean `batch_mean` and population variance `batch_var`.
  void update(int64_t n, double batch_mean, double batch_var) {
    if (n <= 0) return;
    const double total = static_cast<double>(count + n), old_n = static_cast<double>(count);
    const double delta = batch_mean - mean;
    const double sum_sq = var * old_n + batch_var * static_cast<double>(n) + delta * delta * old_n * n / total;
    mean += delta * static_cast<double>(n) / total;
    var = sum_sq / total;
    count += n;
  }
  // The sample standard deviation (Bessel's correction, as TRL's): 0 below two values.
  double std() const {
    return count < 2 ? 0.0 : std::sqrt(var * static_cast<double>(count) / static_cast<double>(count - 1));
  }
  bool operator==(const RunningMoments& o) const { return count == o.count && mean == o.mean && var == o.var; }
};

}  // namespace ppo
