#include "workers/memory.h"

#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <atomic>
#include <cstring>

#ifdef PPO_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace ppo {

torch::Tensor host_copy(const torch::Tensor& t) {
  HostMemoryScope host_state;
  if (!t.is_cuda()) return t.detach().clone();
  auto host = torch::empty(t.sizes(), t.options().device(torch::kCPU).pinned_memory(true));
  host.copy_(t.detach());
  return host;
}

torch::Tensor device_copy(const torch::Tensor& t, const torch::Device& device) {
  if (t.device() == device) return t.detach().clone();
  return t.detach().to(device, /*non_blocking=*/t.is_pinned(), /*copy=*/true);
}

ParamPlacement::ParamPlacement(std::vector<torch::Tensor> params, torch::Device device, bool offload)
    : params_(std::move(params)), device_(device), offload_(offload), on_device_(!offload) {
  torch::NoGradGuard no_grad;
  for (auto& p : params_) p.set_data(offload_ ? host_copy(p) : p.detach().to(device_));
}

void ParamPlacement::to_device() {
  if (!offload_ || on_device_) return;
  torch::NoGradGuard no_grad;
  for (auto& p : params_) {
    p.set_data(device_copy(p, device_));
    if (p.grad().defined()) p.mutable_grad() = device_copy(p.grad(), device_);
  }
  on_device_ = true;
}

void ParamPlacement::to_host() {
  if (!offload_ || !on_device_) return;
  torch::NoGradGuard no_grad;
  for (auto& p : params_) {
    p.set_data(host_copy(p));
    if (p.grad().defined()) p.mutable_grad() = host_copy(p.grad());
  }
  on_device_ = false;
}

// ---- memory accounting ----

namespace {

// Counters of the CPU allocator: [0] device-class (what the compute device holds when it is the CPU), [1] host
// state (allocated inside a HostMemoryScope).
std::atomic<int64_t> current[2], peak[2];
thread_local bool in_host_scope = false;

void count(int kind, int64_t bytes) {
  const int64_t now = current[kind].fetch_add(bytes) + bytes;
  int64_t seen = peak[kind].load();
  while (now > seen && !peak[kind].compare_exchange_weak(seen, now)) {
  }
}

// Wraps the CPU allocator LibTorch had at installation; every buffer's size is added on allocation and taken off
// by its deleter. The wrapper's context owns the inner DataPtr, so the inner allocator frees the memory as before.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* inner) : inner_(inner) {}

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override {
    return wrap(n);
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
#else
  c10::DataPtr allocate(size_t n) const override {
    return wrap(n);
  }
#endif

 private:
  struct Buffer {
    c10::DataPtr inner;
    int64_t bytes;
    int kind;
  };
  static void release(void* context) {
    auto* buffer = static_cast<Buffer*>(context);
    current[buffer->kind].fetch_sub(buffer->bytes);
    delete buffer;
  }
  c10::DataPtr wrap(size_t n) const {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    const int kind = in_host_scope ? 1 : 0;
    count(kind, static_cast<int64_t>(n));
    return {data, new Buffer{std::move(inner), static_cast<int64_t>(n), kind}, &release, device};
  }
  c10::Allocator* inner_;
};

}  // namespace

void install_memory_tracker() {
  static CountingCpuAllocator* installed = [] {
    auto* allocator = new CountingCpuAllocator(c10::GetCPUAllocator());  // lives as long as the process
    c10::SetCPUAllocator(allocator, /*priority=*/100);
    return allocator;
  }();
  (void)installed;
}

MemoryStats memory_stats(const torch::Device& device) {
#ifdef PPO_TORCH_CUDA
  if (device.is_cuda()) {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    const auto& allocated = stats.allocated_bytes[0];  // StatType::AGGREGATE
    return {allocated.current, allocated.peak};
  }
#endif
  return {current[0].load(), peak[0].load()};
}

MemoryStats host_memory_stats() {
  return {current[1].load(), peak[1].load()};
}

HostMemoryScope::HostMemoryScope() : previous_(in_host_scope) {
  in_host_scope = true;
}

HostMemoryScope::~HostMemoryScope() {
  in_host_scope = previous_;
}

void reset_memory_peak(const torch::Device& device) {
#ifdef PPO_TORCH_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
    return;
  }
#endif
  peak[0].store(current[0].load());
}

}  // namespace ppo
