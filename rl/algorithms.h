// PPO algorithms as free functions over tensors: masked statistics, whitening over the global batch, advantage
// estimators (GAE, GRPO, RLOO, REINFORCE++ and its baseline variant, GRPO pass@k), KL estimators, loss aggregation,
// the policy losses (clipped PPO, GSPO, CISPO), the value loss and rollout correction (the rollout's log-probs against
// the training forward's: gap metrics, truncated or masked importance weights).
//
// Source: veRL `verl/trainer/ppo/core_algos.py` and `verl/utils/torch_functional.py` (Apache-2.0), followed
// formula by formula; where this file departs from it (global reductions, denominators across micro-batches and
// ranks) the function comment says so.
//
// Shapes: every `[B, T]` tensor is over response tokens; `response_mask` is `[B, T]`, 0/1, of the values' float
// dtype or convertible to it. Functions run on whatever device their inputs live on and never need gradients
// except the losses (policy_loss, value_loss, agg_loss), which are differentiable.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/config.h"

namespace ppo {

// Sums a small tensor across ranks (identity on one rank). Distributed code passes an MPI allreduce here.
using SumReducer = std::function<torch::Tensor(const torch::Tensor&)>;
SumReducer local_reducer();  // identity

// ---------------------------------------------------------------------------------------------------------------
// Variants by name. Each registry is the one list of its names: validation, error messages and --help use it. A
// config string is parsed once, at start-up, into what the functions below take; a bad name is a UsageError naming
// `key` and listing the valid names (verl: "Unsupported loss mode: X. Supported modes are: [...]"). The advantage
// estimators and the policy losses are registered as rows (verl's @register_adv_est): a new one is its function and
// one row (rl/advantages.cpp, rl/losses.cpp), which validation, the trainer, `ppo config --help` and `--comments` read.
// ---------------------------------------------------------------------------------------------------------------

struct AdvantageInputs;
struct Advantages;

// An advantage estimator (algorithm.adv_estimator).
struct AdvEstimatorSpec {
  const char* name;
  Advantages (*compute)(const AdvantageInputs&);
  bool needs_critic;       // its advantages need the critic's values (a critic is built and trained)
  int64_t min_group_size;  // the fewest responses per prompt (rollout.n) it works with
  const char* help;        // one line
  const char* source;      // paper or reference implementation
};
// gae, grpo, reinforce_plus_plus, rloo, reinforce_plus_plus_baseline, grpo_passk
const std::vector<AdvEstimatorSpec>& adv_estimators();
const AdvEstimatorSpec& adv_estimator(const std::string& name, const std::string& key = "algorithm.adv_estimator");
std::vector<std::string> adv_estimator_names();

// Rollout-correction importance weights (veRL algorithm.rollout_correction.rollout_is): off, token, sequence.
enum class RolloutIsLevel { kOff, kToken, kSequence };
RolloutIsLevel parse_rollout_is_level(const std::string& name,
                                      const std::string& key = "algorithm.rollout_correction.rollout_is");
std::vector<std::string> rollout_is_level_names();  // off, token, sequence

// KL estimators; kl/k1, mse/k2 and low_var_kl/k3 are two names of one estimator.
enum class KlEstimator { kK1, kAbs, kK2, kK3 };
KlEstimator parse_kl_estimator(const std::string& name, const std::string& key = "algorithm.kl_penalty");
std::vector<std::string> kl_estimator_names();  // kl, k1, abs, mse, k2, low_var_kl, k3

enum class LossAggMode { kTokenMean, kSeqMeanTokenSum, kSeqMeanTokenMean, kSeqMeanTokenSumNorm };
LossAggMode parse_loss_agg_mode(const std::string& name, const std::string& key = "actor.loss_agg_mode");
std::vector<std::string> loss_agg_mode_names();  // token-mean, seq-mean-token-sum, seq-mean-token-mean, -sum-norm

// ---------------------------------------------------------------------------------------------------------------
// Masked statistics (veRL torch_functional.masked_sum / masked_mean)
// ---------------------------------------------------------------------------------------------------------------

// sum(values * mask) over all elements -> scalar.
torch::Tensor masked_sum(const torch::Tensor& values, const torch::Tensor& mask);
// sum(values * mask) / sum(mask) -> scalar; an all-zero mask gives 0 (the denominator is clamped to 1e-8).
torch::Tensor masked_mean(const torch::Tensor& values, const torch::Tensor& mask);
// Per-row masked mean: [B, T] -> [B]; rows with an empty mask give 0.
torch::Tensor masked_mean_rows(const torch::Tensor& values, const torch::Tensor& mask);

// Whitening with GLOBAL statistics (veRL masked_whiten over the batch of all ranks): the local
// [sum, sum_sq, count] (float64) go through `reduce` once; mean = sum / count, var = unbiased masked variance
// (times count / (count - 1), as veRL's masked_var); result = (values - mean) * rsqrt(var + 1e-8), plus the mean
// again when shift_mean is false. As in veRL, EVERY position is whitened, masked ones included (they just do not
// enter the statistics): callers multiply by the mask where they need zeros. Throws UsageError when the global
// count is 0 or 1 (the unbiased variance is undefined). [B, T] -> [B, T], same dtype as `values`.
torch::Tensor masked_whiten(const torch::Tensor& values, const torch::Tensor& mask, const SumReducer& reduce,
                            bool shift_mean = true);

// ---------------------------------------------------------------------------------------------------------------
// Advantage estimators (veRL compute_*_advantage_return / compute_*_outcome_advantage)
// ---------------------------------------------------------------------------------------------------------------

struct Advantages {
  torch::Tensor advantages;  // [B, T]
  torch::Tensor returns;     // [B, T]
};

// GAE (Schulman et al. 2015, arXiv:1506.02438), veRL compute_gae_advantage_return: a backward scan where masked
// positions are skipped - `nextvalues` and `lastgaelam` are carried over them unchanged, so values and rewards at
// masked positions never reach an unmasked advantage. returns = advantages + values (before whitening); the
// advantages are then whitened with global statistics (masked positions whitened too, see masked_whiten).
// token_rewards, values, response_mask: [B, T].
Advantages compute_gae(const torch::Tensor& token_rewards, const torch::Tensor& values,
                       const torch::Tensor& response_mask, double gamma, double lam, const SumReducer& reduce);

// GRPO (Shao et al. 2024, arXiv:2402.03300), veRL compute_grpo_outcome_advantage: score_i = sum_t token_rewards
// (all T positions, as veRL), adv_i = (score_i - mean_g) / (std_g + epsilon) with the unbiased std of the group
// (or score_i - mean_g when norm_by_std is false: Dr. GRPO, arXiv:2503.20783); a group of one has mean 0, std 1.
// advantages = returns = adv_i * response_mask. group_ids: [B] int64; groups are never split across ranks.
Advantages compute_grpo(const torch::Tensor& token_rewards, const torch::Tensor& response_mask,
                        const torch::Tensor& group_ids, bool norm_by_std, double epsilon = 1e-6);

// RLOO (Ahmadian et al. 2024, arXiv:2402.14740), veRL compute_rloo_outcome_advantage: with n > 1 responses in the
// group, adv_i = n / (n - 1) * (score_i - mean_g) = score_i - mean of the other n - 1 scores; a group of one keeps
// its raw score. advantages = returns = adv_i * response_mask.
Advantages compute_rloo(const torch::Tensor& token_rewards, const torch::Tensor& response_mask,
                        const torch::Tensor& group_ids);

// REINFORCE++ (Hu 2025, arXiv:2501.03262), veRL compute_reinforce_plus_plus_outcome_advantage: discounted
// return-to-go G_t = r_t + gamma * G_{t+1} over the unmasked positions; a masked position carries G over unchanged
// (after EOS it stays 0, as veRL's reset gives; over a multi-turn trajectory's tool tokens it is neither reset nor
// discounted, where veRL resets it); advantages = global whitening of G over the mask, times the mask; returns = G
// (not masked, as veRL).
Advantages compute_reinforce_plus_plus(const torch::Tensor& token_rewards, const torch::Tensor& response_mask,
                                       double gamma, const SumReducer& reduce);

// REINFORCE++-baseline (Hu 2025, arXiv:2501.03262), veRL compute_reinforce_plus_plus_baseline_outcome_advantage,
// OpenRLHF reinforce_baseline: score_i minus its group's mean score (a group of one subtracts 0), spread over every
// response token, then whitened with GLOBAL statistics over the mask and masked. advantages = returns.
Advantages compute_reinforce_plus_plus_baseline(const torch::Tensor& token_rewards, const torch::Tensor& response_mask,
                                                const torch::Tensor& group_ids, const SumReducer& reduce);

// GRPO pass@k (Chen et al. 2025, arXiv:2503.19595), veRL compute_grpo_passk_outcome_advantage: only the best
// response of each group learns, with advantage r_max - r_second_max (divided by the group's unbiased std + epsilon
// when norm_by_std); every other response gets 0. Of tied best responses the first in the batch is the best (veRL's
// torch.topk leaves the choice open; with a tie the advantage is 0 either way). A group of one -> UsageError.
Advantages compute_grpo_passk(const torch::Tensor& token_rewards, const torch::Tensor& response_mask,
                              const torch::Tensor& group_ids, bool norm_by_std, double epsilon = 1e-6);

// The estimator chosen by algorithm.adv_estimator, on these inputs.
struct AdvantageInputs {
  torch::Tensor token_rewards;          // [B, T] token-level rewards (KL-in-reward already applied)
  torch::Tensor values;                 // [B, T] critic values (gae only)
  torch::Tensor response_mask;          // [B, T]
  torch::Tensor group_ids;              // [B] int64 prompt group of each response (grpo, rloo)
  double gamma = 1;                     // discount (gae, reinforce_plus_plus)
  double lam = 1;                       // GAE lambda
  bool norm_adv_by_std_in_grpo = true;  // GRPO, grpo_passk: divide by the group std (false = Dr. GRPO)
  SumReducer reduce;                    // cross-rank sum for whitening; empty = one rank
};
Advantages compute_advantages(const AdvEstimatorSpec& estimator, const AdvantageInputs& in);

// DAPO's soft overlong punishment (Yu et al. 2025, arXiv:2503.14476, eq. 13; veRL DAPORewardManager with
// reward_model.overlong_buffer): a response longer than max_length - buffer_len loses (length - (max_length -
// buffer_len)) / buffer_len * factor, falling linearly to -factor at max_length; shorter ones lose nothing.
// lengths [B] (response tokens) -> [B] penalties (<= 0). buffer_len must be in [1, max_length].
torch::Tensor overlong_penalty(const torch::Tensor& lengths, int64_t max_length, int64_t buffer_len, double factor);

// TRL's mask_truncated_completions: a response that used all R tokens without ending in EOS was cut off, and its
// whole mask becomes 0 so that it leaves every loss (its reward still counts in its group's statistics, as in
// TRL, where advantages come before the mask). responses [B, R] token ids, response_mask [B, R] -> [B, R].
torch::Tensor mask_truncated(const torch::Tensor& responses, const torch::Tensor& response_mask, int64_t eos_id);

// DAPO dynamic sampling (Yu et al. 2025, arXiv:2503.14476, section 3.2; veRL algorithm.filter_groups): per row,
// whether its prompt group carries a learning signal, that is, not all of its `values` (the filter metric of each
// response) are equal. Those groups give every response a zero advantage under a group baseline. veRL keeps a group
// when its std is > 0; a group of one response is kept there too, and has no signal here (filter_groups needs
// rollout.n >= 2). Rows with a negative group id (padding copies) never have signal.
// values [B], group_ids [B] int64 -> [B] bool.
torch::Tensor groups_with_signal(const torch::Tensor& values, const torch::Tensor& group_ids);

// The names algorithm.filter_groups.metric takes: acc (the reward's correct flag), score (the task's score before
// any shaping), seq_reward (the score with the overlong punishment: veRL's seq_reward and "reward").
const std::vector<std::string>& filter_metric_names();

// ---------------------------------------------------------------------------------------------------------------
// KL estimators (veRL kl_penalty; J. Schulman, "Approximating KL divergence", http://joschu.net/blog/kl-approx.html)
// ---------------------------------------------------------------------------------------------------------------

// k1 (kl): lp - ref; abs: |lp - ref|; k2 (mse): 0.5 (lp - ref)^2;
// k3 (low_var_kl): exp(ref - lp) - (ref - lp) - 1 with ref - lp clamped to [-20, 20] and the result to [-10, 10].
// [B, T] -> [B, T], not masked.
torch::Tensor kl_penalty(const torch::Tensor& log_prob, const torch::Tensor& ref_log_prob, KlEstimator estimator);

// KL in the reward (veRL ray_trainer.apply_kl_penalty): kl = kl_penalty(old, ref) * mask,
// token_rewards = token_scores - kl_coef * kl, current_kl = mean over the real sequences of the GLOBAL batch
// (sample_mask [B], 1 real, 0 padding copy; through `reduce`) of each sequence's masked-mean KL. The trainer feeds
// current_kl to KlController::update with n_steps = num_sequences, as veRL passes its batch size.
struct KlInReward {
  torch::Tensor token_rewards;  // [B, T]
  torch::Tensor kl;             // [B, T] masked token KL
  double current_kl = 0;        // global mean over real sequences of the per-sequence mean KL
  double num_sequences = 0;     // real sequences of the global batch
};
KlInReward apply_kl_in_reward(const torch::Tensor& token_scores, const torch::Tensor& old_log_prob,
                              const torch::Tensor& ref_log_prob, const torch::Tensor& response_mask,
                              const torch::Tensor& sample_mask, double kl_coef, KlEstimator estimator,
                              const SumReducer& reduce);

// ---------------------------------------------------------------------------------------------------------------
// Loss aggregation and losses
// ---------------------------------------------------------------------------------------------------------------

// Loss aggregation (veRL agg_loss). `denominator` > 0 is the GLOBAL normaliser of the whole mini-batch
// (token-mean: response tokens over all micro-batches and ranks; seq-* modes: sequences), so that summing the
// returned values over micro-batches and ranks gives the mini-batch loss exactly; denominator <= 0 uses this
// tensor's own count (mask sum, or B rows). Modes, with S_i = sum_t loss_it * mask_it:
//   token-mean               sum_i S_i / tokens
//   seq-mean-token-sum       sum_i S_i / sequences
//   seq-mean-token-mean      sum_i (S_i / sum_t mask_it) / sequences
//   seq-mean-token-sum-norm  sum_i (S_i / norm_length) / sequences   (Dr. GRPO, arXiv:2503.20783; norm_length =
//                            data.max_response_length; as current veRL, which divides by sequences - older veRL
//                            did not)
// loss_mat, mask: [B, T] -> scalar.
torch::Tensor agg_loss(const torch::Tensor& loss_mat, const torch::Tensor& mask, LossAggMode mode,
                       double denominator = -1, double norm_length = 1);
// The denominator a mode divides by: tokens for token-mean, sequences for the seq-* modes.
double agg_denominator(LossAggMode mode, double tokens, double sequences);

// The policy loss of p.mode, aggregated by p.loss_agg_mode (veRL compute_policy_loss_vanilla / _gspo / _cispo):
//   vanilla  clipped surrogate (Schulman et al. 2017, arXiv:1707.06347) with asymmetric clip [1 - low, 1 + high] and
//            dual-clip (Ye et al. 2019, arXiv:1912.09729) bounding the loss by -A * clip_ratio_c where A < 0; the
//            log-ratio is clamped to [-20, 20] before exp.
//   gspo     GSPO (Zheng et al. 2025, arXiv:2507.18071): one importance ratio per sequence, s_i = exp(mean over its
//            tokens of lp - old), clipped to [1 - low, 1 + high] as a whole; per token the ratio is written
//            sg(s_i) * exp(lp - sg(lp)) so that the gradient is s_i times the mean token gradient (veRL; log s_i
//            clamped at 10). The paper's clip ranges are tiny (3e-4, 4e-4) and its aggregation seq-mean-token-mean;
//            veRL and this function take both from the config.
//   cispo    CISPO (MiniMax-M1, arXiv:2506.13585): loss = -sg(clip(r, 1 - low, 1 + high)) * A * lp, so every token
//            keeps its gradient and only its weight is clipped; clipfrac counts tokens whose weight was clipped.
// Where rollout_is_weights is defined ([B, T], no gradient), each token's loss is multiplied by its weight before
// aggregation (rollout correction, as veRL). clipfrac_lower is the dual-clip fraction (0 for gspo and cispo);
// ppo_kl is the masked mean of old_log_prob - log_prob (clamped to [-20, 20] for vanilla and cispo, as veRL).
struct PolicyLoss {
  torch::Tensor loss;            // scalar, aggregated by p.loss_agg_mode (differentiable)
  torch::Tensor clipfrac;        // scalar metric: masked mean of (clipped loss > unclipped loss) / clipped weights
  torch::Tensor clipfrac_lower;  // scalar metric: masked mean of dual-clip activations (A < 0)
  torch::Tensor ppo_kl;          // scalar metric: masked mean of old_log_prob - log_prob
};
struct PolicyLossSpec;
struct PolicyLossParams {
  const PolicyLossSpec* loss = nullptr;                 // actor.policy_loss.loss_mode; nullptr: vanilla
  double clip_ratio_low = 0.2;                          // ratio lower bound is 1 - clip_ratio_low
  double clip_ratio_high = 0.2;                         // ratio upper bound is 1 + clip_ratio_high
  double clip_ratio_c = 3.0;                            // dual-clip bound (> 1; vanilla only)
  LossAggMode loss_agg_mode = LossAggMode::kTokenMean;  // see agg_loss
  double denominator = -1;                              // global normaliser for agg_loss (<= 0: local)
  double norm_length = 1;                               // seq-mean-token-sum-norm constant
  torch::Tensor rollout_is_weights;                     // [B, T] rollout-correction weights; undefined = none
};
// old_log_prob, log_prob, advantages, response_mask: [B, T]. clip_ratio_c <= 1 (vanilla) -> UsageError.
PolicyLoss policy_loss(const torch::Tensor& old_log_prob, const torch::Tensor& log_prob,
                       const torch::Tensor& advantages, const torch::Tensor& response_mask, const PolicyLossParams& p);

// The per-token losses of one policy loss, before rollout-correction weights and aggregation, with its metrics.
struct TokenPolicyLoss {
  torch::Tensor losses;                    // [B, T]
  torch::Tensor clipfrac, clipfrac_lower;  // scalar metrics
  torch::Tensor ppo_kl;                    // scalar metric
};
// A policy loss (actor.policy_loss.loss_mode).
struct PolicyLossSpec {
  const char* name;
  TokenPolicyLoss (*token_losses)(const torch::Tensor& old_log_prob, const torch::Tensor& log_prob,
                                  const torch::Tensor& advantages, const torch::Tensor& response_mask,
                                  const PolicyLossParams& p);
  const char* help;    // one line
  const char* source;  // paper or reference implementation
};
const std::vector<PolicyLossSpec>& policy_losses();  // vanilla, gspo, cispo
const PolicyLossSpec& policy_loss_spec(const std::string& name, const std::string& key = "actor.policy_loss.loss_mode");
std::vector<std::string> policy_loss_names();

// veRL compute_value_loss: 0.5 * agg(max((v - R)^2, (clip(v, old - c, old + c) - R)^2)).
struct ValueLoss {
  torch::Tensor loss;      // scalar (differentiable)
  torch::Tensor clipfrac;  // scalar metric: masked mean of (clipped loss > unclipped loss)
};
// vpreds, returns, old_values, response_mask: [B, T].
ValueLoss value_loss(const torch::Tensor& vpreds, const torch::Tensor& returns, const torch::Tensor& old_values,
                     const torch::Tensor& response_mask, double cliprange_value, LossAggMode loss_agg_mode,
                     double denominator = -1, double norm_length = 1);

// Categorical entropy (veRL entropy_from_logits) is ppo::entropy_from_logits in rollout/rollout.h (one definition).

// The token classes the actor's entropy is also logged by (actor/entropy_<name>): tokens with a positive, a negative
// and a zero advantage (pos_adv, neg_adv, zero_adv: entropy moves with the covariance of log-prob and advantage, Cui
// et al. 2025, arXiv:2505.22617, so its collapse shows first in one of them), and the tokens of responses judged
// correct and incorrect (correct, incorrect; rows whose reward says nothing about correctness are in neither; both
// left out when `correct` is undefined). advantages, response_mask [B, R]; correct, has_correct [B] (1/0) -> (name,
// [B, R] 0/1 mask) pairs, in that order.
std::vector<std::pair<std::string, torch::Tensor>> entropy_token_classes(const torch::Tensor& advantages,
                                                                         const torch::Tensor& response_mask,
                                                                         const torch::Tensor& correct,
                                                                         const torch::Tensor& has_correct);

// Explained variance of the critic (veRL metric critic/vf_explained_var) over the masked positions of the GLOBAL
// batch: 1 - var(returns - values) / (var(returns) + 1e-5), unbiased variances from float64 moments (count, sums,
// sums of squares) summed through `reduce`. [B, T] each -> scalar.
double explained_var(const torch::Tensor& values, const torch::Tensor& returns, const torch::Tensor& mask,
                     const SumReducer& reduce);

// ---------------------------------------------------------------------------------------------------------------
// Rollout correction: the rollout samples with its own log-probs (KV-cache decode, maybe bf16, maybe an older
// policy); the training forward recomputes them as old_log_prob. veRL verl/trainer/ppo/rollout_corr_helper.py and
// verl/utils/debug/metrics.py; OpenRLHF is_correction_type. Only tokens under response_mask count.
// ---------------------------------------------------------------------------------------------------------------

// Local sums of the gap between the two, to be reduced over ranks (Metrics add_mean / add_max):
//   probs_diff = |exp(old) - exp(rollout)| per token (veRL training/rollout_probs_diff_mean/max): sum and max;
//   kl = rollout - old (KL(rollout || training), veRL rollout_corr/kl) and k3 = exp(old - rollout) - (old - rollout)
//   - 1 (rollout_corr/k3_kl): token sums; tokens = the mask's sum. [B, T] each.
struct RolloutGap {
  double tokens = 0;
  double probs_diff_sum = 0, probs_diff_max = 0;
  double kl_sum = 0, k3_kl_sum = 0;
};
RolloutGap rollout_gap(const torch::Tensor& old_log_prob, const torch::Tensor& rollout_log_prob,
                       const torch::Tensor& response_mask);

// Importance weights pi_train / pi_rollout = exp(old - rollout) (veRL compute_rollout_correction_weights):
//   token     w_t = exp(clamp(old_t - rollout_t, -20, 20))
//   sequence  w_i = exp(clamp(sum_t (old_t - rollout_t) * mask_t, -20, 20)) on every token of row i
// then, with lower <= 0, truncated IS (TIS, Yao et al. 2025 "Your efficient RL framework secretly brings you
// off-policy RL training"): w = min(w, upper); with lower > 0, masking (IcePop / MIS): w outside [lower, upper]
// becomes 0, inside stays as it is. Masked positions get 0. No gradient. [B, T] -> [B, T]. upper <= 0, or
// lower > upper -> UsageError.
torch::Tensor rollout_is_weights(const torch::Tensor& old_log_prob, const torch::Tensor& rollout_log_prob,
                                 const torch::Tensor& response_mask, RolloutIsLevel level, double upper,
                                 double lower = 0);

}  // namespace ppo
