// verl's named phase timer, shared by the steps of train/.
#pragma once

#include <chrono>
#include <string>

#include "parallel/context.h"
#include "rl/metrics.h"
#include "workers/memory.h"

namespace ppo {

// verl's named phase timer: records timing_s/<name> when it goes out of scope, and the phase's memory on the compute
// device (workers/memory.h): memory/<name>_peak_mib, the most held by live tensors during the phase, all state
// included, and memory/<name>_added_mib, that peak above what was held when the phase began (activations, gradients,
// temporaries). Both are maxima over ranks. With more than one rank in the job, comm/<name>_sent_mib: the bytes this
// rank sent in the phase's collectives.
class PhaseTimer {
 public:
  PhaseTimer(Metrics& metrics, std::string name, torch::Device device)
      : metrics_(metrics), name_(std::move(name)), device_(device), start_(std::chrono::steady_clock::now()) {
    reset_memory_peak(device_);
    start_bytes_ = memory_stats(device_).current_bytes;
    start_sent_ = Context::get().bytes_sent();
  }
  ~PhaseTimer() {
    metrics_.add_value("timing_s/" + name_,
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    if (Context::get().job_size() > 1)
      metrics_.add_max("comm/" + name_ + "_sent_mib", (Context::get().bytes_sent() - start_sent_) / (1 << 20));
    const double peak = static_cast<double>(memory_stats(device_).peak_bytes), mib = 1 << 20;
    metrics_.add_max("memory/" + name_ + "_peak_mib", peak / mib);
    metrics_.add_max("memory/" + name_ + "_added_mib", (peak - static_cast<double>(start_bytes_)) / mib);
  }

 private:
  Metrics& metrics_;
  std::string name_;
  torch::Device device_;
  std::chrono::steady_clock::time_point start_;
  int64_t start_bytes_ = 0;
  double start_sent_ = 0;
};

}  // namespace ppo
