#include "model/autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include "common/error.h"

namespace ppo {

// Autocast state per device. LibTorch >= 2.4 takes the device type; before, CPU and CUDA have their own functions.
#define PPO_TORCH_AUTOCAST_BY_DEVICE (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))

namespace {

bool autocast_enabled(torch::DeviceType d) {
#if PPO_TORCH_AUTOCAST_BY_DEVICE
  return at::autocast::is_autocast_enabled(d);
#else
  return d == torch::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

torch::ScalarType autocast_dtype(torch::DeviceType d) {
#if PPO_TORCH_AUTOCAST_BY_DEVICE
  return at::autocast::get_autocast_dtype(d);
#else
  return d == torch::kCUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
#endif
}

void autocast_set(torch::DeviceType d, bool enabled, torch::ScalarType dtype) {
#if PPO_TORCH_AUTOCAST_BY_DEVICE
  at::autocast::set_autocast_enabled(d, enabled);
  at::autocast::set_autocast_dtype(d, dtype);
#else
  if (d == torch::kCUDA) {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

}  // namespace

torch::ScalarType autocast_compute_dtype(const torch::Tensor& x) {
  const torch::DeviceType d = x.device().type();
  return autocast_enabled(d) ? autocast_dtype(d) : x.scalar_type();
}

void AutocastGuard::check_name(const std::string& name) {
  usage_check(name == "none" || name == "bfloat16" || name == "float16",
              "model.autocast_dtype: unknown '" + name + "'; valid: none | bfloat16 | float16");
}

AutocastGuard::AutocastGuard(const std::string& name, torch::Device device) : device_type_(device.type()) {
  check_name(name);
  if (name == "none") return;
  active_ = true;
  was_enabled_ = autocast_enabled(device_type_);
  was_dtype_ = autocast_dtype(device_type_);
  autocast_set(device_type_, true, name == "bfloat16" ? torch::kBFloat16 : torch::kHalf);
  at::autocast::increment_nesting();
}

// As torch.autocast's __exit__: restore the state, and drop the cast parameters cached inside the region when the
// outermost region ends (they would be stale after the next optimizer step).
AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  autocast_set(device_type_, was_enabled_, was_dtype_);
}

}  // namespace ppo
