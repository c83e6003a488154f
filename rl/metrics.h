// Step metrics with veRL's flat names, reduced over ALL ranks (the SyncBatchNorm lesson): every mean is a global
// sum over a global count, every max/min a global max/min. One allreduce per kind per step.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "parallel/context.h"
#include "rl/algorithms.h"

namespace ppo {

class Metrics {
 public:
  // Adds `sum` and `count` to the global mean of `name` (e.g. a score sum over this rank's real samples).
  void add_mean(const std::string& name, double sum, double count);
  // The same for a mean that may have nothing to average (entropy of a token class no token is in): left out of
  // reduce()'s result at steps where the global count is 0, rather than NaN.
  void add_mean_if_any(const std::string& name, double sum, double count);
  // A value that is already the same on every rank (grad norm, lr): averaged over the calls, counted once.
  void add_global(const std::string& name, double value);
  void add_max(const std::string& name, double value);
  void add_min(const std::string& name, double value);
  // A final value (timings, counters) taken as is from rank 0.
  void set(const std::string& name, double value);
  // Adds `value` to the final value `name` (a phase timed several times in one step), taken from rank 0.
  void add_value(const std::string& name, double value);
  // Reduces across ranks; every rank must call it with the same names (SPMD). Returns name -> value.
  std::map<std::string, double> reduce(Context& context) const;

 private:
  std::map<std::string, std::pair<double, double>> means_;
  std::set<std::string> optional_means_;  // add_mean_if_any's names
  std::map<std::string, std::pair<double, double>> globals_;
  std::map<std::string, double> maxes_, mins_, values_;
};

// Means accumulated where their tensors are (the compute device) over the micro-batches of a mini-batch, then added
// to a Metrics in one device-to-host copy (flush): an update phase reads its metrics once per mini-batch, not once
// per value and micro-batch.
class DeviceMeans {
 public:
  // Adds `sum` (a 0-dim tensor) and `count` (0-dim tensor, or known on the host) to the mean `name`
  // (Metrics::add_mean).
  void add(const std::string& name, const torch::Tensor& sum, const torch::Tensor& count);
  void add(const std::string& name, const torch::Tensor& sum, double count);
  // As Metrics::add_mean_if_any.
  void add_if_any(const std::string& name, const torch::Tensor& sum, const torch::Tensor& count);
  // Adds every mean to `metrics` (one copy of all sums and counts to the host) and starts again.
  void flush(Metrics& metrics);

 private:
  struct Entry {
    torch::Tensor sum, count;  // float64, on the tensors' device; count undefined while only host counts came
    double host_count = 0;
    bool if_any = false;
  };
  Entry& entry(const std::string& name, const torch::Tensor& sum, bool if_any);
  std::map<std::string, Entry> entries_;
};

// Reduced metrics as JSON, to travel between ranks or sit in a checkpoint as what they are: an object of name ->
// number, NaN and the infinities as the strings "nan", "inf" and "-inf" (JSON has no number for them).
nlohmann::json metrics_json(const std::map<std::string, double>& metrics);
// metrics_json's object read back; anything else is a UsageError naming `what` (where the JSON came from) and the key.
std::map<std::string, double> parse_metrics_json(const nlohmann::json& object, const std::string& what);

// The SumReducer (rl/algorithms.h) of the global batch: a sum over all ranks through `context` (a copy; the argument
// is left alone).
SumReducer rank_sum_reducer(Context& context);

}  // namespace ppo
