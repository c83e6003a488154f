// Where model state lives, and how much memory each phase takes.
//
// Offload (actor.offload.*, critic.offload.*, ref.offload.*): parameters, gradients and optimizer state can live in
// host memory and visit the compute device only for the phase that needs them. Every move is a real copy into a new
// buffer, also host to host on a CPU-only machine, so the same code paths run (and are tested) there; on a GPU they
// free device memory.
//
// Memory accounting: a counting wrapper around LibTorch's CPU allocator (installed once at start-up) and, on CUDA,
// the caching allocator's statistics. A phase reads its peak as "memory/<phase>_peak_mib".
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace ppo {

// A copy of `t` in host memory (pinned when `t` is on a CUDA device, so the copy back can be asynchronous); always a
// new buffer.
torch::Tensor host_copy(const torch::Tensor& t);
// A copy of `t` on `device`; always a new buffer.
torch::Tensor device_copy(const torch::Tensor& t, const torch::Device& device);

// Moves a module's parameters between host memory and the compute device (param offload). The parameter tensors
// keep their identity (set_data), so optimizers and autograd keep referring to them.
class ParamPlacement {
 public:
  // `offload`: the parameters live in host memory between phases. Otherwise they stay on `device`.
  ParamPlacement(std::vector<torch::Tensor> params, torch::Device device, bool offload);
  void to_device();  // before a phase (no-op unless offloaded and on the host)
  void to_host();    // after a phase (no-op unless offloaded)
  bool offloaded() const { return offload_; }
  torch::Device device() const { return device_; }

 private:
  std::vector<torch::Tensor> params_;
  torch::Device device_;
  bool offload_;
  bool on_device_;
};

// Brings parameters to the device for one scope (a phase), and back to the host at its end.
class OnDevice {
 public:
  explicit OnDevice(ParamPlacement& placement) : placement_(placement) { placement_.to_device(); }
  ~OnDevice() { placement_.to_host(); }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  ParamPlacement& placement_;
};

// ---- memory accounting ----

// Installs the counting CPU allocator (idempotent). Tensors allocated before it are not counted.
void install_memory_tracker();

struct MemoryStats {
  int64_t current_bytes = 0;  // bytes held by live tensors on the device
  int64_t peak_bytes = 0;     // the most held since the last reset_memory_peak
};

// Allocation statistics of `device` (CUDA: the caching allocator's "allocated bytes"; CPU: the counting allocator,
// without the host state allocated in a HostMemoryScope, so that on a CPU-only machine the figures say what the
// compute device would hold and offload shows its effect).
MemoryStats memory_stats(const torch::Device& device);
void reset_memory_peak(const torch::Device& device);
// CPU bytes allocated inside HostMemoryScopes: offloaded parameters, gradients and optimizer state.
MemoryStats host_memory_stats();

// CPU allocations made by this thread inside the scope count as host state (host_copy and the optimizer's update in
// host memory use it).
class HostMemoryScope {
 public:
  HostMemoryScope();
  ~HostMemoryScope();
  HostMemoryScope(const HostMemoryScope&) = delete;
  HostMemoryScope& operator=(const HostMemoryScope&) = delete;

 private:
  bool previous_;
};

}  // namespace ppo
