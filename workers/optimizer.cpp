#include "workers/optimizer.h"

#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>

#include "common/error.h"
#include "common/files.h"
#include "common/manifest.h"
#include "model/weights.h"
#include "parallel/tensor_sync.h"
#include "workers/memory.h"
#include "workers/saved_optimizer.h"

namespace ppo {

const std::vector<std::string>& warmup_style_names() {
  static const std::vector<std::string> names = {"constant", "cosine"};
  return names;
}

double scheduled_lr(const OptimConfig& optim, int64_t step, int64_t total_steps) {
  if (optim.lr_warmup_steps > 0 && step < optim.lr_warmup_steps)
    return optim.lr * static_cast<double>(step + 1) / static_cast<double>(optim.lr_warmup_steps);
  if (optim.warmup_style != "cosine") return optim.lr;
  int64_t decay = std::max<int64_t>(1, total_steps - optim.lr_warmup_steps);
  double progress = std::min(1.0, static_cast<double>(step - optim.lr_warmup_steps) / static_cast<double>(decay));
  return optim.lr * (optim.min_lr_ratio + (1 - optim.min_lr_ratio) * 0.5 * (1 + std::cos(M_PI * progress)));
}

// at::_fused_adamw_ has had a CUDA kernel since LibTorch 2.0 and a CPU one since 2.4.
#define PPO_TORCH_HAS_FUSED_ADAMW (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))

bool fused_adamw_available() {
  return PPO_TORCH_HAS_FUSED_ADAMW;
}

Optimizer::Optimizer(std::vector<torch::Tensor> params, const OptimConfig& optim, double grad_clip, int64_t total_steps,
                     const OffloadConfig& offload)
    : params_(std::move(params)),
      moments_(params_.size()),
      optim_(optim),
      offload_(offload),
      grad_clip_(grad_clip),
      total_steps_(total_steps) {}

void Optimizer::zero_grad() {
  for (auto& p : params_) p.mutable_grad() = torch::Tensor();
}

std::vector<torch::Tensor> Optimizer::gradients() {
  std::vector<torch::Tensor> grads;
  for (auto& p : params_) {
    if (!p.grad().defined()) {
      grads.emplace_back();
    } else if (offload_.grad) {
      grads.push_back(host_copy(p.grad()));
      p.mutable_grad() = torch::Tensor();  // the device copy is freed now
    } else {
      grads.push_back(p.grad());
    }
  }
  return grads;
}

void adamw_update(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                  int64_t steps, double lr, const OptimConfig& optim) {
  const double beta1 = optim.betas.at(0), beta2 = optim.betas.at(1);
  if (optim.weight_decay != 0) param.mul_(1 - lr * optim.weight_decay);
  const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(steps));
  const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(steps));
  exp_avg.mul_(beta1).add_(grad, 1 - beta1);
  exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
  torch::Tensor denom = (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(optim.eps);
  param.addcdiv_(exp_avg, denom, -lr / bias_correction1);
}

// Parameter i's moments on `param`'s device: zeros before its first update, moved there when they were loaded while
// the parameters were elsewhere (param offload).
Optimizer::Moments& Optimizer::moments_on(size_t i, const torch::Tensor& param) {
  Moments& m = moments_[i];
  if (!m.exp_avg.defined()) {
    m.exp_avg = torch::zeros_like(param);
    m.exp_avg_sq = torch::zeros_like(param);
  } else if (m.exp_avg.device() != param.device()) {
    m.exp_avg = m.exp_avg.to(param.device());
    m.exp_avg_sq = m.exp_avg_sq.to(param.device());
  }
  return m;
}

// One tensor's AdamW update; with offload.optimizer it runs on a host copy of the parameter.
void Optimizer::update(size_t i, const torch::Tensor& grad_in, double lr) {
  torch::Tensor& p = params_[i];
  const bool on_host = offload_.optimizer;
  std::optional<HostMemoryScope> host;
  if (on_host) host.emplace();
  torch::Tensor param = on_host ? host_copy(p) : p.detach();
  torch::Tensor grad = grad_in.device() == param.device() ? grad_in : grad_in.to(param.device());
  Moments& m = moments_on(i, param);
  m.steps += 1;
  adamw_update(param, grad, m.exp_avg, m.exp_avg_sq, m.steps, lr, optim_);
  if (on_host) p.detach().copy_(param);
}

// One at::_fused_adamw_ call for the parameters `group` (one device, one dtype). The kernel reads each parameter's
// step from a float32 tensor on that device (exact to 2^24 steps): made here from the host counts with one copy, so
// the counts stay the state that save() writes.
void Optimizer::update_fused(const std::vector<size_t>& group, const std::vector<torch::Tensor>& grads, double lr) {
#if PPO_TORCH_HAS_FUSED_ADAMW
  std::vector<torch::Tensor> params, group_grads, exp_avgs, exp_avg_sqs, state_steps;
  torch::Tensor steps = torch::empty({static_cast<int64_t>(group.size())}, torch::kFloat32);
  float* steps_data = steps.data_ptr<float>();
  for (size_t k = 0; k < group.size(); ++k) {
    const size_t i = group[k];
    params.push_back(params_[i].detach());
    group_grads.push_back(grads[i]);
    Moments& m = moments_on(i, params.back());
    m.steps += 1;
    steps_data[k] = static_cast<float>(m.steps);
    exp_avgs.push_back(m.exp_avg);
    exp_avg_sqs.push_back(m.exp_avg_sq);
  }
  steps = steps.to(params[0].device());
  for (size_t k = 0; k < group.size(); ++k) state_steps.push_back(steps[static_cast<int64_t>(k)]);
  at::_fused_adamw_(params, group_grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, state_steps, lr,
                    /*beta1=*/optim_.betas.at(0), /*beta2=*/optim_.betas.at(1), optim_.weight_decay, optim_.eps,
                    /*amsgrad=*/false, /*maximize=*/false);
#else
  (void)group, (void)grads, (void)lr;
  throw std::logic_error(std::string("at::_fused_adamw_ needs LibTorch >= 2.4; this build has ") + TORCH_VERSION);
#endif
}

namespace {

// Which path updates each parameter with a gradient this step (parameters without one are skipped).
struct UpdatePlan {
  std::vector<std::vector<size_t>> fused;  // one at::_fused_adamw_ call each: parameters of one device and dtype
  std::vector<size_t> per_tensor;          // adamw_update, one parameter at a time
};

// What the fused kernel takes (its check_fast_path_restrictions): parameter, gradient and moments dense, of one
// dtype, device and layout, with elements.
bool fusable(const torch::Tensor& param, const torch::Tensor& grad, const Optimizer::Moments& m) {
  if (param.numel() == 0 || !param.is_contiguous() || !grad.is_contiguous()) return false;
  if (grad.scalar_type() != param.scalar_type() || grad.device() != param.device()) return false;
  return !m.exp_avg.defined() ||
         (m.exp_avg.is_contiguous() && m.exp_avg_sq.is_contiguous() && m.exp_avg.scalar_type() == param.scalar_type());
}

UpdatePlan plan_updates(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                        const std::vector<Optimizer::Moments>& moments, bool fused) {
  UpdatePlan plan;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!grads[i].defined()) continue;
    if (!fused || !fusable(params[i], grads[i], moments[i])) {
      plan.per_tensor.push_back(i);
      continue;
    }
    auto same = std::find_if(plan.fused.begin(), plan.fused.end(), [&](const std::vector<size_t>& group) {
      const torch::Tensor& first = params[group.front()];
      return first.device() == params[i].device() && first.scalar_type() == params[i].scalar_type();
    });
    if (same == plan.fused.end()) same = plan.fused.insert(plan.fused.end(), std::vector<size_t>());
    same->push_back(i);
  }
  return plan;
}

}  // namespace

double global_norm(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> defined;
  for (const auto& t : tensors)
    if (t.defined()) defined.push_back(t);
  if (defined.empty()) return 0.0;
  std::vector<torch::Tensor> norms = at::_foreach_norm(defined, 2);  // one fused kernel per device and dtype
  for (auto& n : norms) n = n.to(norms[0].device(), torch::kDouble);
  return torch::stack(norms).norm().item<double>();  // the step's one host read
}

StepResult Optimizer::step(Context& context) {
  all_reduce_gradients(params_, context);
  StepResult result;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads = gradients();
  {
    std::optional<HostMemoryScope> host;
    if (offload_.grad) host.emplace();
    result.grad_norm = global_norm(grads);
  }
  result.lr = scheduled_lr(optim_, steps_taken_, total_steps_);
  if (!std::isfinite(result.grad_norm)) {
    result.skipped = true;
    zero_grad();
    return result;
  }
  // Global-norm clip as torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when above max_norm.
  const double scale = grad_clip_ > 0 && result.grad_norm > grad_clip_ ? grad_clip_ / (result.grad_norm + 1e-6) : 1.0;
  model_state_bytes_ = 0;
  for (size_t i = 0; i < params_.size(); ++i)
    model_state_bytes_ += static_cast<int64_t>(params_[i].nbytes() + (grads[i].defined() ? grads[i].nbytes() : 0));
  const bool fused = fused_ && fused_adamw_available() && !offload_.grad && !offload_.optimizer;
  const UpdatePlan plan = plan_updates(params_, grads, moments_, fused);
  for (const std::vector<size_t>& group : plan.fused) {
    if (scale != 1.0) {
      std::vector<torch::Tensor> group_grads;
      for (size_t i : group) group_grads.push_back(grads[i]);
      at::_foreach_mul_(group_grads, scale);
    }
    update_fused(group, grads, result.lr);
    result.fused = true;
  }
  for (size_t i : plan.per_tensor) {
    if (scale != 1.0) grads[i].mul_(scale);
    update(i, grads[i], result.lr);
    grads[i] = torch::Tensor();  // streamed: at most one offloaded gradient is on the device at a time
  }
  zero_grad();
  ++steps_taken_;
  model_state_bytes_ += state_bytes();
  return result;
}

Optimizer::Moments Optimizer::moments(size_t i) const {
  const Moments& m = moments_.at(i);
  if (m.exp_avg.defined()) return m;
  return {torch::zeros_like(params_[i]), torch::zeros_like(params_[i]), m.steps};
}

int64_t Optimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& m : moments_)
    if (m.exp_avg.defined()) bytes += 2 * m.exp_avg.numel() * static_cast<int64_t>(m.exp_avg.element_size());
  return bytes;
}

// File layout: [steps [N] int64, exp_avg_0 .. exp_avg_{N-1}, exp_avg_sq_0 .. exp_avg_sq_{N-1}], in host memory;
// tensors that never received an update are stored as zeros. Loading places the state as offload.optimizer says.
void Optimizer::save(const std::string& path) const {
  std::vector<torch::Tensor> out;
  torch::Tensor steps = torch::zeros({static_cast<int64_t>(moments_.size())}, torch::kInt64);
  for (size_t i = 0; i < moments_.size(); ++i) steps[i] = moments_[i].steps;
  out.push_back(steps);
  for (int which = 0; which < 2; ++which)
    for (size_t i = 0; i < moments_.size(); ++i) {
      const torch::Tensor& t = which == 0 ? moments_[i].exp_avg : moments_[i].exp_avg_sq;
      out.push_back(t.defined() ? t.cpu() : torch::zeros_like(params_[i], torch::TensorOptions().device(torch::kCPU)));
    }
  torch::serialize::OutputArchive archive(std::make_shared<torch::jit::CompilationUnit>());
  for (size_t i = 0; i < out.size(); ++i) archive.write(std::to_string(i), out[i]);  // torch::save's layout
  save_archive(archive, path);
}

void Optimizer::place_moments(size_t i, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq, int64_t steps) {
  moments_[i].steps = steps;
  if (offload_.optimizer) {
    moments_[i].exp_avg = host_copy(exp_avg.to(params_[i].scalar_type()));
    moments_[i].exp_avg_sq = host_copy(exp_avg_sq.to(params_[i].scalar_type()));
  } else {
    moments_[i].exp_avg = device_copy(exp_avg.to(params_[i].scalar_type()), params_[i].device());
    moments_[i].exp_avg_sq = device_copy(exp_avg_sq.to(params_[i].scalar_type()), params_[i].device());
  }
}

void Optimizer::load(const std::string& path, const std::vector<std::string>& names) {
  const std::string suffix = "_optim.pt";
  if (!std::filesystem::exists(path) && path.size() > suffix.size() &&
      path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
    const std::string index = path.substr(0, path.size() - suffix.size()) + "_optim.index.json";
    if (std::filesystem::exists(index) && names.size() == params_.size()) {
      const SavedOptimizerState saved(index);
      for (size_t i = 0; i < params_.size(); ++i) {
        auto [exp_avg, exp_avg_sq] = saved.read(names[i], 0, params_[i].numel());
        place_moments(i, exp_avg.view_as(params_[i]), exp_avg_sq.view_as(params_[i]), saved.steps(names[i]));
      }
      return;
    }
  }
  if (!std::filesystem::exists(path)) throw UsageError("optimizer state not found: " + path);
  check_regular_file(path);
  verify_manifest_entry(path);
  std::vector<torch::Tensor> in;
  try {
    torch::load(in, path);
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    throw UsageError(path + ": not an optimizer state file (" + what.substr(0, what.find('\n')) + ")");
  }
  const size_t n = params_.size();
  usage_check(in.size() == 2 * n + 1 && in[0].numel() == static_cast<int64_t>(n),
              path + ": optimizer state for another model (" + std::to_string(in.empty() ? 0 : in[0].numel()) +
                  " tensors, this model has " + std::to_string(n) + ")");
  for (size_t i = 0; i < n; ++i) {
    usage_check(in[1 + i].sizes() == params_[i].sizes() && in[1 + n + i].sizes() == params_[i].sizes(),
                path + ": optimizer state of tensor " + std::to_string(i) + " has another shape than its parameter");
    place_moments(i, in[1 + i], in[1 + n + i], in[0][i].item<int64_t>());
  }
}

}  // namespace ppo
