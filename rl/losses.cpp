// Loss aggregation, the policy losses with their registry, and the value loss (see algorithms.h). Source: veRL
// verl/trainer/ppo/core_algos.py (Apache-2.0), re-expressed in LibTorch.
#include "rl/algorithms.h"

#include "common/error.h"
#include "common/strings.h"
#include "rl/algorithms_internal.h"

namespace ppo {

// ----- losses ----------------------------------------------------------------------------------------------------

double agg_denominator(LossAggMode mode, double tokens, double sequences) {
  return mode == LossAggMode::kTokenMean ? tokens : sequences;
}

torch::Tensor agg_loss(const torch::Tensor& loss_mat, const torch::Tensor& mask, LossAggMode mode, double denominator,
                       double norm_length) {
  check_bt(loss_mat, mask, "loss_mat");
  auto m = mask_like(mask, loss_mat);
  if (mode == LossAggMode::kTokenMean) {
    if (denominator > 0) return (loss_mat * m).sum() / denominator;
    return (loss_mat * m).sum() / m.sum().clamp_min(1e-8);
  }
  const double sequences = denominator > 0 ? denominator : static_cast<double>(std::max<int64_t>(1, m.size(0)));
  auto seq_losses = (loss_mat * m).sum(-1);  // [B] token-sum per sequence
  if (mode == LossAggMode::kSeqMeanTokenMean) seq_losses = seq_losses / m.sum(-1).clamp_min(1e-8);
  if (mode == LossAggMode::kSeqMeanTokenSumNorm) {
    TORCH_CHECK(norm_length > 0, "seq-mean-token-sum-norm needs norm_length > 0, got ", norm_length);
    seq_losses = seq_losses / norm_length;
  }
  return seq_losses.sum() / sequences;
}

namespace {

// vanilla and cispo take the ratio of the clamped log-ratio (veRL); ppo_kl is its masked mean.
struct ClampedRatio {
  torch::Tensor log_ratio, ratio, ppo_kl;
};
ClampedRatio clamped_ratio(const torch::Tensor& old_log_prob, const torch::Tensor& log_prob,
                           const torch::Tensor& response_mask) {
  auto log_ratio = (log_prob - old_log_prob).clamp(-20.0, 20.0);
  return {log_ratio, log_ratio.exp(), masked_mean(-log_ratio.detach(), response_mask)};
}

TokenPolicyLoss vanilla_losses(const torch::Tensor& old_log_prob, const torch::Tensor& log_prob,
                               const torch::Tensor& advantages, const torch::Tensor& response_mask,
                               const PolicyLossParams& p) {
  usage_check(p.clip_ratio_c > 1.0,
              "actor.clip_ratio_c: the dual-clip bound must be > 1.0, got " + std::to_string(p.clip_ratio_c));
  const auto [log_ratio, ratio, ppo_kl] = clamped_ratio(old_log_prob, log_prob, response_mask);
  auto pg_losses1 = -advantages * ratio;
  auto pg_losses2 = -advantages * ratio.clamp(1 - p.clip_ratio_low, 1 + p.clip_ratio_high);
  auto clip_pg_losses1 = torch::max(pg_losses1, pg_losses2);
  auto clipfrac = masked_mean(torch::gt(pg_losses2, pg_losses1).to(ratio.scalar_type()), response_mask);

  auto pg_losses3 = -advantages * p.clip_ratio_c;  // dual-clip bound for A < 0
  auto clip_pg_losses2 = torch::min(pg_losses3, clip_pg_losses1);
  auto negative = advantages < 0;
  auto clipfrac_lower =
      masked_mean((torch::gt(clip_pg_losses1, pg_losses3) & negative).to(ratio.scalar_type()), response_mask);
  return {torch::where(negative, clip_pg_losses2, clip_pg_losses1), clipfrac, clipfrac_lower, ppo_kl};
}

TokenPolicyLoss gspo_losses(const torch::Tensor& old_log_prob, const torch::Tensor& log_prob,
                            const torch::Tensor& advantages, const torch::Tensor& response_mask,
                            const PolicyLossParams& p) {
  auto log_ratio = log_prob - old_log_prob;  // veRL's GSPO does not clamp it
  auto ppo_kl = masked_mean(-log_ratio.detach(), response_mask);
  auto seq_log_ratio = masked_mean_rows(log_ratio, response_mask).detach();  // [B], lengths clamped as veRL
  auto log_s = (log_prob - log_prob.detach() + seq_log_ratio.unsqueeze(-1)).clamp_max(10.0);
  auto s = log_s.exp();  // [B, T]: s_i in value, s_i * d lp_t in gradient
  auto pg_losses1 = -advantages * s;
  auto pg_losses2 = -advantages * s.clamp(1 - p.clip_ratio_low, 1 + p.clip_ratio_high);
  auto clipfrac = masked_mean(torch::gt(pg_losses2, pg_losses1).to(s.scalar_type()), response_mask);
  return {torch::max(pg_losses1, pg_losses2), clipfrac, torch::zeros({}, s.options()), ppo_kl};
}

TokenPolicyLoss cispo_losses(const torch::Tensor& old_log_prob, const torch::Tensor& log_prob,
                             const torch::Tensor& advantages, const torch::Tensor& response_mask,
                             const PolicyLossParams& p) {
  const auto [log_ratio, ratio, ppo_kl] = clamped_ratio(old_log_prob, log_prob, response_mask);
  auto clipped = ratio.clamp(1 - p.clip_ratio_low, 1 + p.clip_ratio_high).detach();
  auto clipfrac = masked_mean(torch::ne(ratio.detach(), clipped).to(ratio.scalar_type()), response_mask);
  return {-clipped * advantages * log_prob, clipfrac, torch::zeros({}, ratio.options()), ppo_kl};
}

}  // namespace

const std::vector<PolicyLossSpec>& policy_losses() {
  static const std::vector<PolicyLossSpec> rows = {
      {"vanilla", vanilla_losses, "PPO's clipped ratio, with the dual clip for negative advantages",
       "Schulman et al. 2017; Ye et al. 2020"},
      {"gspo", gspo_losses, "one ratio and one clip per sequence (the geometric mean of its token ratios)",
       "Zheng et al. 2025, arXiv:2507.18071; veRL loss_mode=gspo"},
      {"cispo", cispo_losses, "the clipped importance weight, without gradient, times the log-prob",
       "MiniMax-M1, arXiv:2506.13585; veRL and TRL cispo"},
  };
  return rows;
}

PolicyLoss policy_loss(const torch::Tensor& old_log_prob, const torch::Tensor& log_prob,
                       const torch::Tensor& advantages, const torch::Tensor& response_mask, const PolicyLossParams& p) {
  check_bt(log_prob, response_mask, "log_prob");
  const PolicyLossSpec& loss = p.loss ? *p.loss : policy_losses().front();
  TokenPolicyLoss t = loss.token_losses(old_log_prob, log_prob, advantages, response_mask, p);
  if (p.rollout_is_weights.defined()) {
    check_bt(p.rollout_is_weights, response_mask, "rollout_is_weights");
    t.losses = t.losses * p.rollout_is_weights.to(t.losses.device(), t.losses.scalar_type()).detach();
  }
  auto agg = agg_loss(t.losses, response_mask, p.loss_agg_mode, p.denominator, p.norm_length);
  return {agg, t.clipfrac.detach(), t.clipfrac_lower.detach(), t.ppo_kl};
}

std::vector<std::string> policy_loss_names() {
  return names_of(policy_losses());
}

const PolicyLossSpec& policy_loss_spec(const std::string& name, const std::string& key) {
  return row_named(policy_losses(), name, key, "policy loss mode");
}

ValueLoss value_loss(const torch::Tensor& vpreds, const torch::Tensor& returns, const torch::Tensor& old_values,
                     const torch::Tensor& response_mask, double cliprange_value, LossAggMode loss_agg_mode,
                     double denominator, double norm_length) {
  check_bt(vpreds, response_mask, "vpreds");
  // veRL clip_by_value: max(min(v, old + c), old - c).
  auto vpredclipped = torch::max(torch::min(vpreds, old_values + cliprange_value), old_values - cliprange_value);
  auto vf_losses1 = (vpreds - returns).pow(2);
  auto vf_losses2 = (vpredclipped - returns).pow(2);
  auto clipped = torch::max(vf_losses1, vf_losses2);
  auto loss = 0.5 * agg_loss(clipped, response_mask, loss_agg_mode, denominator, norm_length);
  auto clipfrac = masked_mean(torch::gt(vf_losses2, vf_losses1).to(vpreds.scalar_type()), response_mask);
  return {loss, clipfrac.detach()};
}

}  // namespace ppo
