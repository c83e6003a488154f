// See rl/distillation.h.
#include "rl/distillation.h"

#include <algorithm>
#include <map>

#include "common/error.h"
#include "common/strings.h"
#include "rl/algorithms_internal.h"

namespace ppo {

namespace {

const char* const kRewardMode = "reverse_kl_reward";

}  // namespace

std::vector<std::pair<std::string, std::string>> distill_loss_modes() {
  // The loss modes: distillation_loss_coef x an estimate of KL(student || teacher) on each sampled token, from
  // d = log pi_student - log pi_teacher, added to the actor's loss (veRL's distillation.loss_mode).
  const std::map<KlEstimator, std::string> estimate = {{KlEstimator::kK1, "d"},
                                                       {KlEstimator::kAbs, "|d|"},
                                                       {KlEstimator::kK2, "d^2 / 2"},
                                                       {KlEstimator::kK3, "exp(-d) + d - 1"}};
  std::vector<std::pair<std::string, std::string>> modes = {
      {kRewardMode,
       "coef x (log pi_teacher - log pi_student) on each sampled token as its reward, through algorithm.adv_estimator "
       "(Thinking Machines' on-policy distillation, prime-rl)"}};
  for (const std::string& name : kl_estimator_names())
    modes.push_back({name, "a loss of coef x " + estimate.at(parse_kl_estimator(name)) +
                               ", d = log pi_student - log pi_teacher (veRL's " + name + ")"});
  return modes;
}

DistillSpec distill_spec(const std::string& name, const std::string& key) {
  DistillSpec spec;
  spec.name = name;
  if (name == kRewardMode) {
    spec.reward = true;
    return spec;
  }
  const std::vector<std::string> estimators = kl_estimator_names();
  if (std::find(estimators.begin(), estimators.end(), name) == estimators.end()) {
    std::vector<std::string> valid = {kRewardMode};
    valid.insert(valid.end(), estimators.begin(), estimators.end());
    throw UsageError(key + ": unknown distillation loss mode '" + name + "'; valid: " + join(valid, ", "));
  }
  spec.estimator = parse_kl_estimator(name, key);
  return spec;
}

torch::Tensor reverse_kl_rewards(const torch::Tensor& student_log_probs, const torch::Tensor& teacher_log_probs,
                                 const torch::Tensor& response_mask, double coef) {
  check_bt(student_log_probs, response_mask, "student_log_probs");
  check_bt(teacher_log_probs, response_mask, "teacher_log_probs");
  const torch::Tensor mask = mask_like(response_mask, student_log_probs);
  return coef * (teacher_log_probs - student_log_probs) * mask;
}

torch::Tensor distill_token_losses(const torch::Tensor& student_log_probs, const torch::Tensor& teacher_log_probs,
                                   const DistillSpec& spec, double clamp) {
  TORCH_CHECK(!spec.reward, "distill_token_losses: ", spec.name, " is a reward, not a loss");
  torch::Tensor losses = kl_penalty(student_log_probs, teacher_log_probs, spec.estimator);
  return clamp > 0 ? losses.clamp_max(clamp) : losses;
}

DistillSums distill_sums(const torch::Tensor& student_log_probs, const torch::Tensor& teacher_log_probs,
                         const torch::Tensor& student_argmax, const torch::Tensor& teacher_argmax,
                         const torch::Tensor& mask) {
  const torch::Tensor m = mask.to(torch::kFloat64);
  const torch::Tensor student = student_log_probs.to(torch::kFloat64), teacher = teacher_log_probs.to(torch::kFloat64);
  DistillSums sums;
  sums.tokens = m.sum().item<double>();
  sums.reverse_kl = ((student - teacher) * m).sum().item<double>();
  sums.teacher_log_prob = (teacher * m).sum().item<double>();
  if (student_argmax.defined() && teacher_argmax.defined())
    sums.argmax_agree = ((student_argmax == teacher_argmax).to(torch::kFloat64) * m).sum().item<double>();
  return sums;
}

}  // namespace ppo
