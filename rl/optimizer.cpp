#include "rl/optimizer.h"

#include <cmath>

#include "common/random.h"

namespace ppo {

double scheduled_lr(const OptimConfig& optim, int64_t step, int64_t total_steps) {
  if (optim.lr_warmup_steps > 0 && step < optim.lr_warmup_steps)
    return optim.lr * static_cast<double>(step + 1) / static_cast<double>(optim.lr_warmup_steps);
  if (optim.warmup_style != "cosine") return optim.lr;
  int64_t decay = std::max<int64_t>(1, total_steps - optim.lr_warmup_steps);
  double progress = std::min(1.0, static_cast<double>(step - optim.lr_warmup_steps) / static_cast<double>(decay));
  return optim.lr * (optim.min_lr_ratio + (1 - optim.min_lr_ratio) * 0.5 * (1 + std::cos(M_PI * progress)));
}

Optimizer::Optimizer(std::vector<torch::Tensor> params, const OptimConfig& optim, double grad_clip, int64_t total_steps)
    : params_(std::move(params)),
      optim_(optim),
      grad_clip_(grad_clip),
      total_steps_(total_steps),
      adamw_(params_, torch::optim::AdamWOptions(optim.lr)
                          .betas(std::make_tuple(optim.betas.at(0), optim.betas.at(1)))
                          .eps(optim.eps)
                          .weight_decay(optim.weight_decay)) {}

void Optimizer::zero_grad() {
  for (auto& p : params_)
    if (p.grad().defined()) p.mutable_grad().zero_();
}

StepResult Optimizer::step(Context& context) {
  all_reduce_gradients(params_, context);
  StepResult result;
  torch::NoGradGuard no_grad;
  torch::Tensor total = torch::zeros({}, torch::kFloat64);
  for (const auto& p : params_)
    if (p.grad().defined()) total += p.grad().to(torch::kFloat64).pow(2).sum().to(total.device());
  result.grad_norm = std::sqrt(total.item<double>());
  result.lr = scheduled_lr(optim_, steps_taken_, total_steps_);
  if (!std::isfinite(result.grad_norm)) {
    result.skipped = true;
    zero_grad();
    return result;
  }
  // Global-norm clip as torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when above max_norm.
  if (grad_clip_ > 0 && result.grad_norm > grad_clip_) {
    double scale = grad_clip_ / (result.grad_norm + 1e-6);
    for (auto& p : params_)
      if (p.grad().defined()) p.mutable_grad().mul_(scale);
  }
  for (auto& group : adamw_.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(result.lr);
  adamw_.step();
  zero_grad();
  ++steps_taken_;
  return result;
}

void Optimizer::save(const std::string& path) {
  torch::save(adamw_, path);
}

void Optimizer::load(const std::string& path) {
  torch::load(adamw_, path);
}

}  // namespace ppo

namespace ppo {

void run_updates(const Batch& batch, const UpdateSchedule& s, Optimizer& optimizer, Context& context, Metrics& metrics,
                 const MicroLoss& micro_loss) {
  int64_t skipped = 0;
  for (int64_t epoch = 0; epoch < s.epochs; ++epoch) {
    Batch data = batch;
    if (s.shuffle_seed >= 0) {
      auto order = seeded_permutation(batch.size(), hash_combine(static_cast<uint64_t>(s.shuffle_seed), epoch));
      data = batch.select(torch::tensor(order, torch::kInt64));
    }
    for (const Batch& mini : data.chunk(s.mini_batches)) {
      torch::Tensor local = torch::stack({mini.at("response_mask").sum().to(torch::kFloat64),
                                          mini.at("sample_mask").sum().to(torch::kFloat64)})
                                .cpu();
      context.all_reduce(local, ReduceOp::sum);
      Denominators d{local[0].item<double>(), local[1].item<double>()};
      d.first_micro = true;
      for (const Batch& micro : mini.split(s.micro_batch_size)) {
        torch::Tensor loss = micro_loss(micro, d, metrics);
        loss.backward();
        d.first_micro = false;
      }
      StepResult r = optimizer.step(context);
      skipped += r.skipped;
      if (!r.skipped) metrics.add_global(s.metric_prefix + "/grad_norm", r.grad_norm);
      metrics.add_global(s.metric_prefix + "/lr", r.lr);
    }
  }
  metrics.set(s.metric_prefix + "/skipped_steps", static_cast<double>(skipped));
}

}  // namespace ppo
