#include "decode/step_graphs.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#ifdef PPO_TORCH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ppo {

int64_t decode_bucket(int64_t rows, int64_t max_rows) {
  int64_t bucket = rows <= 8 ? 1 : (rows + 15) / 16 * 16;
  while (bucket < rows) bucket *= 2;  // 1, 2, 4, 8
  return std::min(bucket, std::max(rows, max_rows));
}

#ifdef PPO_TORCH_CUDA

struct StepGraphs::Graphs {
  at::cuda::MempoolId_t pool = at::cuda::graph_pool_handle();
  std::map<int64_t, std::unique_ptr<at::cuda::CUDAGraph>> by_rows;
  std::set<int64_t> warmed;
  bool failed = false;
};

StepGraphs::StepGraphs(bool enabled, torch::Device device) {
  active_ = enabled && device.is_cuda();
  if (active_) graphs_ = std::make_unique<Graphs>();
}

StepGraphs::~StepGraphs() = default;

void StepGraphs::run(int64_t rows, const std::function<void()>& step) {
  if (!active_ || graphs_->failed) return step();
  Graphs& g = *graphs_;
  auto found = g.by_rows.find(rows);
  if (found != g.by_rows.end()) {
    found->second->replay();
    ++replays_;
    return;
  }
  if (g.warmed.insert(rows).second) return step();  // the warm-up run
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  const at::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  torch::cuda::synchronize();  // the warm-up's work is done before capture starts on the side stream
  try {
    c10::cuda::CUDAStreamGuard on_side(side);
    graph->capture_begin(g.pool);
    try {
      step();
    } catch (...) {
      try {
        graph->capture_end();  // ends the stream's capture and the allocator's use of the pool
      } catch (...) {
      }
      throw;
    }
    graph->capture_end();
  } catch (const std::exception& e) {
    g.failed = true;
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    std::fprintf(stderr,
                 "rollout: capturing the decode step as a CUDA graph (%lld rows) failed, decoding eagerly: %s\n",
                 static_cast<long long>(rows), what.c_str());
    torch::cuda::synchronize();
    return step();
  }
  torch::cuda::synchronize();
  ++captures_;
  graph->replay();  // capture recorded the step without running it
  ++replays_;
  g.by_rows.emplace(rows, std::move(graph));
}

#else

struct StepGraphs::Graphs {};

StepGraphs::StepGraphs(bool, torch::Device) {}

StepGraphs::~StepGraphs() = default;

void StepGraphs::run(int64_t, const std::function<void()>& step) {
  step();
}

#endif

}  // namespace ppo
