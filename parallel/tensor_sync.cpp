// See parallel/tensor_sync.h.
#include "parallel/tensor_sync.h"

#include <stdexcept>

namespace ppo {

torch::Tensor flatten_tensors(const std::vector<torch::Tensor>& parts) {
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& p : parts) flat.push_back(p.reshape({-1}));
  return torch::cat(flat);
}

void unflatten_into(const torch::Tensor& flat, const std::vector<torch::Tensor>& parts) {
  int64_t offset = 0;
  for (const torch::Tensor& p : parts) {
    p.copy_(flat.slice(0, offset, offset + p.numel()).view_as(p));
    offset += p.numel();
  }
}

void all_reduce_gradients(const std::vector<torch::Tensor>& params, Context& context) {
  if (context.world_size() == 1 || params.empty()) return;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  torch::Tensor flat = flatten_tensors(grads);
  context.all_reduce(flat, ReduceOp::sum);
  unflatten_into(flat, grads);
}

void check_identical_across_ranks(const std::vector<torch::Tensor>& params, Context& context, const std::string& what) {
  if (context.world_size() == 1 || params.empty()) return;  // every rank has the same list
  torch::NoGradGuard no_grad;
  // In host pieces of at most 2^18 elements: a float64 copy of a whole embedding would cost more than the model's
  // resting state at ZeRO-3.
  constexpr int64_t kPiece = 1 << 18;
  std::vector<double> sums;
  for (size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor flat = params[i].detach().reshape({-1});
    double sum = 0, weighted = 0;
    for (int64_t begin = 0; begin < flat.numel(); begin += kPiece) {
      const int64_t end = std::min(flat.numel(), begin + kPiece);
      const torch::Tensor p = flat.slice(0, begin, end).to(torch::kCPU, torch::kFloat64);
      const torch::Tensor weights = torch::arange(begin + 1, end + 1, torch::kFloat64).remainder(97) + 1;
      sum += p.sum().item<double>();
      weighted += (p.abs() * weights).sum().item<double>();
    }
    sums.push_back(sum);
    sums.push_back(weighted * static_cast<double>(i + 1));
  }
  torch::Tensor local = torch::tensor(sums, torch::kFloat64);
  torch::Tensor high = local.clone(), low = local.clone();
  context.all_reduce(high, ReduceOp::max);
  context.all_reduce(low, ReduceOp::min);
  if (!torch::equal(high, low))
    throw std::runtime_error("parameters differ between ranks at " + what +
                             "\n---> HINT: every rank must run the same build, config and checkpoint");
}

}  // namespace ppo
