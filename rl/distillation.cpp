// See rl/distillation.h.
#include "rl/distillation.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "common/error.h"
#include "common/strings.h"
#include "rl/algorithms_internal.h"

namespace ppo {

namespace {

const char* const kRewardMode = "reverse_kl_reward";

struct TopkMode {
  const char* name;
  TopkDivergence divergence;
  const char* help;
};
const TopkMode kTopkModes[] = {
    {"forward_kl_topk", TopkDivergence::kForwardKl,
     "a loss of coef x KL(teacher || student) on the teacher's distillation.topk most likely tokens of each position "
     "and the rest of the vocabulary (GKD's supervised side; NeMo RL's top-k logits)"},
    {"reverse_kl_topk", TopkDivergence::kReverseKl,
     "a loss of coef x KL(student || teacher) on the teacher's distillation.topk most likely tokens and the rest"},
    {"jsd_topk", TopkDivergence::kJsd,
     "a loss of coef x the generalised JSD with distillation.jsd_beta on the teacher's distillation.topk most likely "
     "tokens and the rest (GKD, arXiv:2306.13649)"}};

// sum over the last dimension of p (log p - log q), from log p and log q.
torch::Tensor kl_sum(const torch::Tensor& log_p, const torch::Tensor& log_q) {
  return (log_p.exp() * (log_p - log_q)).sum(-1);
}

// k log-probs and, last, the log of the probability outside them (at least 1e-8): [..., k] -> [..., k + 1].
torch::Tensor with_rest(const torch::Tensor& top) {
  const torch::Tensor rest = (1 - top.exp().sum(-1, /*keepdim=*/true)).clamp_min(1e-8).log();
  return torch::cat({top, rest}, -1);
}

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
  for (const TopkMode& mode : kTopkModes) modes.push_back({mode.name, mode.help});
  return modes;
}

DistillSpec distill_spec(const std::string& name, const std::string& key) {
  DistillSpec spec;
  spec.name = name;
  if (name == kRewardMode) {
    spec.reward = true;
    return spec;
  }
  for (const TopkMode& mode : kTopkModes)
    if (name == mode.name) {
      spec.topk = mode.divergence;
      return spec;
    }
  const std::vector<std::string> estimators = kl_estimator_names();
  if (std::find(estimators.begin(), estimators.end(), name) == estimators.end()) {
    std::vector<std::string> valid;
    for (const auto& [mode, help] : distill_loss_modes()) valid.push_back(mode);
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
  TORCH_CHECK(!spec.reward && !spec.uses_topk(), "distill_token_losses: ", spec.name, " is not a sampled-token loss");
  torch::Tensor losses = kl_penalty(student_log_probs, teacher_log_probs, spec.estimator);
  return clamp > 0 ? losses.clamp_max(clamp) : losses;
}

torch::Tensor topk_distill_losses(const torch::Tensor& student_topk, const torch::Tensor& teacher_topk,
                                  const DistillSpec& spec, double jsd_beta, double clamp) {
  TORCH_CHECK(student_topk.sizes() == teacher_topk.sizes(), "topk_distill_losses: student ", student_topk.sizes(),
              " and teacher ", teacher_topk.sizes(), " differ");
  const double floor = std::log(1e-8);
  const torch::Tensor s = with_rest(student_topk).clamp_min(floor);
  const torch::Tensor t = with_rest(teacher_topk.to(student_topk.dtype())).clamp_min(floor);
  torch::Tensor losses;
  switch (spec.topk) {
    case TopkDivergence::kForwardKl:
      losses = kl_sum(t, s);
      break;
    case TopkDivergence::kReverseKl:
      losses = kl_sum(s, t);
      break;
    case TopkDivergence::kJsd: {
      // log(beta e^t + (1 - beta) e^s), written so that it is t exactly where s == t.
      const torch::Tensor m = t + torch::log1p((1 - jsd_beta) * torch::expm1(s - t));
      losses = jsd_beta * kl_sum(t, m) + (1 - jsd_beta) * kl_sum(s, m);
      break;
    }
    case TopkDivergence::kNone:
      TORCH_CHECK(false, "topk_distill_losses: ", spec.name, " is not a top-k loss");
  }
  losses = losses.clamp_min(0);
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
