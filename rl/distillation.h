// On-policy distillation's signals (distillation.*): a frozen teacher's log-probs of the tokens the student sampled
// become a per-token reward (the reverse KL, negated: Thinking Machines' "On-Policy Distillation", prime-rl) or a
// loss term beside the policy loss (veRL's distillation.loss_mode k1/k2/k3, the KL loss's estimators).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "rl/algorithms.h"

namespace ppo {

// The top-k loss modes' divergences between the student's and the teacher's distributions on the teacher's top tokens.
enum class TopkDivergence { kNone, kForwardKl, kReverseKl, kJsd };

// distillation.loss_mode: the reverse KL as the reward, one of the KL estimators on the sampled tokens as a loss, or a
// divergence on the teacher's top-k tokens of each position as a loss.
struct DistillSpec {
  std::string name;
  bool reward = false;                          // reverse_kl_reward
  KlEstimator estimator = KlEstimator::kK1;     // the sampled-token loss modes' estimator
  TopkDivergence topk = TopkDivergence::kNone;  // the top-k loss modes' divergence
  bool uses_topk() const { return topk != TopkDivergence::kNone; }
};
// The spec of `name`; otherwise a UsageError naming `key` and the valid names.
DistillSpec distill_spec(const std::string& name, const std::string& key = "distillation.loss_mode");
// The names distillation.loss_mode takes, each with its one-line help (for `ppo config --comments`).
std::vector<std::pair<std::string, std::string>> distill_loss_modes();

// The per-token reward of reverse_kl_reward: coef x (teacher - student) on the response tokens, 0 elsewhere. Its
// expectation under the student is -coef x KL(student || teacher) per token. All [B, R].
torch::Tensor reverse_kl_rewards(const torch::Tensor& student_log_probs, const torch::Tensor& teacher_log_probs,
                                 const torch::Tensor& response_mask, double coef);

// The per-token distillation loss of a loss mode: kl_penalty(student, teacher, estimator), clamped above at `clamp`
// (veRL's loss_clamp; <= 0: none), not masked. Differentiable in `student_log_probs`. [B, R] -> [B, R].
torch::Tensor distill_token_losses(const torch::Tensor& student_log_probs, const torch::Tensor& teacher_log_probs,
                                   const DistillSpec& spec, double clamp);

// The per-token loss of a top-k mode (`spec.topk`), from the student's and the teacher's log-probs of the teacher's
// top-k tokens at each position ([B, R, k] each, full-vocabulary log-probs, not renormalised over the k). The rest of
// the vocabulary is one more category (probability 1 - the k's), so that each divergence is one between two whole
// distributions over k + 1 outcomes: at least 0, a lower bound of the divergence over the vocabulary, and 0 with a zero
// gradient where the student is the teacher (without it, a sum over k tokens can be negative and its gradient at that
// point is not 0). Every log-prob is floored at log 1e-8, as veRL does, so that a probability of 0 adds 0, not NaN.
//   forward_kl_topk: sum t (log t - log s);  reverse_kl_topk: sum s (log s - log t);
//   jsd_topk: beta KL(t || m) + (1 - beta) KL(s || m), m = beta t + (1 - beta) s (GKD's generalised JSD,
//   Agarwal et al. 2024, arXiv:2306.13649; TRL's and veRL's beta).
// Floored at 0 against rounding, then capped at `clamp` when > 0. Differentiable in `student_topk`. -> [B, R].
torch::Tensor topk_distill_losses(const torch::Tensor& student_topk, const torch::Tensor& teacher_topk,
                                  const DistillSpec& spec, double jsd_beta, double clamp);

// What the metrics report of one batch on this rank, as sums over the real response tokens (`mask` [B, R]):
// the k1 reverse KL (student - teacher), the teacher's log-prob, and the tokens where the student's most likely
// token is the teacher's (`student_argmax`, `teacher_argmax` [B, R]; undefined: not counted).
struct DistillSums {
  double reverse_kl = 0, teacher_log_prob = 0, argmax_agree = 0, tokens = 0;
};
DistillSums distill_sums(const torch::Tensor& student_log_probs, const torch::Tensor& teacher_log_probs,
                         const torch::Tensor& student_argmax, const torch::Tensor& teacher_argmax,
                         const torch::Tensor& mask);

}  // namespace ppo
