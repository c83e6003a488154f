#include "model/lora_linear.h"

namespace ppo {

torch::nn::Linear make_linear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

LoraAdapterImpl::LoraAdapterImpl(int64_t in, int64_t out, int64_t rank, double scale, double dropout_p)
    : scaling(scale), dropout(dropout_p), enabled(std::make_shared<bool>(true)) {
  lora_A = register_module("lora_A", make_linear(in, rank, /*bias=*/false));
  lora_B = register_module("lora_B", make_linear(rank, out, /*bias=*/false));
}

torch::Tensor LoraAdapterImpl::forward(const torch::Tensor& x) {
  const torch::Tensor in = dropout > 0 ? torch::dropout(x, dropout, is_training()) : x;
  return lora_B(lora_A(in)) * scaling;
}

torch::Tensor LoraAdapterImpl::delta_weight() const {
  return torch::matmul(lora_B->weight, lora_A->weight) * scaling;
}

torch::Tensor adapted(torch::nn::Linear& linear, LoraAdapter& adapter, const torch::Tensor& x) {
  torch::Tensor y = linear(x);
  if (adapter && *adapter->enabled) y = y + adapter(x);
  return y;
}

}  // namespace ppo
