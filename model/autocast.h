// model.autocast_dtype: torch.autocast for LibTorch, over the version-specific calls of 1.13 and 2.x.
#pragma once

#include <torch/torch.h>

#include <string>

namespace ppo {

// model.autocast_dtype for the forwards of one model: while alive, ops on `device` run under autocast to `dtype`
// (matmuls in the low dtype, reductions such as softmax and log_softmax in float32), as torch.autocast does. No-op
// for "none". The version-specific calls (LibTorch 1.13 has per-device setters, 2.x set_autocast_*(device, ...))
// live here. UsageError for an unknown name.
class AutocastGuard {
 public:
  AutocastGuard(const std::string& autocast_dtype, torch::Device device);
  // UsageError for a name other than none, bfloat16, float16.
  static void check_name(const std::string& autocast_dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  torch::DeviceType device_type_ = torch::kCPU;
  bool was_enabled_ = false;
  torch::ScalarType was_dtype_ = torch::kBFloat16;
};

// The dtype the attention's q will have: autocast's when it is on for x's device, else x's.
torch::ScalarType autocast_compute_dtype(const torch::Tensor& x);

}  // namespace ppo
