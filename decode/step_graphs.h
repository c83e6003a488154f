// The decode step replayed as CUDA graphs (rollout.cuda_graphs): one graph per batch-size bucket, captured lazily on
// a side stream the second time its bucket runs (the first run is the eager warm-up: cuBLAS handles, workspaces and
// the caching allocator's blocks exist before capture), every graph in one shared memory pool. A step captured this
// way must read and write only tensors allocated outside the capture, in place (the decoder's static buffers and
// KV cache), and must not synchronise with the host. If a capture fails, the step runs eagerly from then on, with one
// log line. Without a CUDA LibTorch, or on the CPU, every step runs eagerly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include <torch/torch.h>

namespace ppo {

class StepGraphs {
 public:
  // `enabled`: rollout.cuda_graphs; graphs are used only on a CUDA `device`, in a build with a CUDA LibTorch.
  StepGraphs(bool enabled, torch::Device device);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // Whether steps are replayed as graphs (their row counts must then be buckets: decode_bucket).
  bool active() const { return active_; }
  // Runs `step` for the bucket `rows`: eagerly the first time (or always, without graphs), captured and replayed the
  // second time, replayed after.
  void run(int64_t rows, const std::function<void()>& step);

  int64_t captures() const { return captures_; }  // graphs captured
  int64_t replays() const { return replays_; }    // steps replayed

 private:
  struct Graphs;  // the CUDA side, defined only in a CUDA build
  bool active_ = false;
  std::unique_ptr<Graphs> graphs_;
  int64_t captures_ = 0, replays_ = 0;
};

// Bucket sizes of StepGraphs: 1, 2, 4, 8, then multiples of 16, the first at or above `rows`, at most `max_rows`.
int64_t decode_bucket(int64_t rows, int64_t max_rows);

}  // namespace ppo
