// PPO algorithms over tensors; see algorithms.h. Source: veRL verl/trainer/ppo/core_algos.py and
// verl/utils/torch_functional.py (Apache-2.0), re-expressed in LibTorch.
// Here: the registries of names, masked statistics, DAPO's pieces, KL, explained variance and rollout correction;
// the advantage estimators are in advantages.cpp, the losses in losses.cpp.
#include "rl/algorithms.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <tuple>

#include "common/error.h"
#include "common/strings.h"
#include "rl/algorithms_internal.h"

namespace ppo {

namespace {

// A registry: every name of a variant, in the order they are listed.
template <class E>
struct Named {
  const char* name;
  E value;
};

template <class E, size_t N>
std::vector<std::string> names_of(const Named<E> (&table)[N]) {
  std::vector<std::string> names;
  for (const auto& entry : table) names.push_back(entry.name);
  return names;
}

template <class E, size_t N>
E parse_named(const Named<E> (&table)[N], const std::string& name, const std::string& key, const char* what) {
  for (const auto& entry : table)
    if (name == entry.name) return entry.value;
  const std::string valid = join(table, ", ", [](const Named<E>& entry) { return std::string(entry.name); });
  throw UsageError(key + ": unknown " + what + " '" + name + "'; valid: " + valid);
}

constexpr Named<RolloutIsLevel> kRolloutIsLevels[] = {
    {"off", RolloutIsLevel::kOff}, {"token", RolloutIsLevel::kToken}, {"sequence", RolloutIsLevel::kSequence}};
constexpr Named<KlEstimator> kKlEstimators[] = {
    {"kl", KlEstimator::kK1}, {"k1", KlEstimator::kK1},         {"abs", KlEstimator::kAbs}, {"mse", KlEstimator::kK2},
    {"k2", KlEstimator::kK2}, {"low_var_kl", KlEstimator::kK3}, {"k3", KlEstimator::kK3}};
constexpr Named<LossAggMode> kLossAggModes[] = {{"token-mean", LossAggMode::kTokenMean},
                                                {"seq-mean-token-sum", LossAggMode::kSeqMeanTokenSum},
                                                {"seq-mean-token-mean", LossAggMode::kSeqMeanTokenMean},
                                                {"seq-mean-token-sum-norm", LossAggMode::kSeqMeanTokenSumNorm}};

}  // namespace

// The mask as a tensor of `like`'s dtype and device.
torch::Tensor mask_like(const torch::Tensor& mask, const torch::Tensor& like) {
  return mask.to(like.device(), like.scalar_type());
}

void check_bt(const torch::Tensor& t, const torch::Tensor& mask, const char* what) {
  TORCH_CHECK(t.dim() == 2 && t.sizes() == mask.sizes(), what, " must be [B, T] like response_mask ", mask.sizes(),
              ", got ", t.sizes());
}

SumReducer local_reducer() {
  return [](const torch::Tensor& t) { return t; };
}

// ----- masked statistics -----------------------------------------------------------------------------------------

torch::Tensor masked_sum(const torch::Tensor& values, const torch::Tensor& mask) {
  return (values * mask_like(mask, values)).sum();
}

torch::Tensor masked_mean(const torch::Tensor& values, const torch::Tensor& mask) {
  auto m = mask_like(mask, values);
  return (values * m).sum() / m.sum().clamp_min(1e-8);
}

torch::Tensor masked_mean_rows(const torch::Tensor& values, const torch::Tensor& mask) {
  auto m = mask_like(mask, values);
  return (values * m).sum(-1) / m.sum(-1).clamp_min(1e-8);  // [B]
}

torch::Tensor masked_whiten(const torch::Tensor& values, const torch::Tensor& mask, const SumReducer& reduce,
                            bool shift_mean) {
  auto v64 = values.detach().to(torch::kDouble);
  auto m64 = mask.to(values.device(), torch::kDouble);
  auto local = torch::stack({(v64 * m64).sum(), (v64 * v64 * m64).sum(), m64.sum()});  // [3]: sum, sum_sq, count
  auto global = (reduce ? reduce(local) : local).to(torch::kCPU, torch::kDouble).contiguous();
  const double* s = global.data_ptr<double>();
  const double sum = s[0], sum_sq = s[1], count = s[2];
  usage_check(count > 0, "whitening: the response mask is empty over the whole batch (no response tokens)");
  usage_check(count != 1,
              "whitening: the whole batch holds a single response token, its variance is undefined; "
              "use a larger batch");
  const double mean = sum / count;
  // Unbiased variance, as veRL masked_var: E[(x - mean)^2] * count / (count - 1).
  const double var = std::max(0.0, (sum_sq - count * mean * mean) / (count - 1));
  auto whitened = (values - mean) * (1.0 / std::sqrt(var + 1e-8));
  if (!shift_mean) whitened = whitened + mean;
  return whitened;
}

RolloutIsLevel parse_rollout_is_level(const std::string& name, const std::string& key) {
  return parse_named(kRolloutIsLevels, name, key, "importance-weight level");
}

std::vector<std::string> rollout_is_level_names() {
  return names_of(kRolloutIsLevels);
}

// ----- DAPO's pieces and the entropy token classes ---------------------------------------------------------------

torch::Tensor overlong_penalty(const torch::Tensor& lengths, int64_t max_length, int64_t buffer_len, double factor) {
  TORCH_CHECK(buffer_len >= 1 && buffer_len <= max_length, "overlong_penalty: buffer_len ", buffer_len,
              " must be in [1, ", max_length, "]");
  const double expected = static_cast<double>(max_length - buffer_len);
  auto exceed = lengths.to(torch::kFloat64) - expected;
  return (-exceed / static_cast<double>(buffer_len) * factor).clamp_max(0.0).to(torch::kFloat32);
}

torch::Tensor mask_truncated(const torch::Tensor& responses, const torch::Tensor& response_mask, int64_t eos_id) {
  TORCH_CHECK(responses.sizes() == response_mask.sizes(), "mask_truncated: responses ", responses.sizes(),
              " and response_mask ", response_mask.sizes(), " differ");
  const int64_t R = responses.size(1);
  // [B] the last position is a response token (a multi-turn trajectory's last token is always sampled)
  auto full = response_mask.select(1, R - 1) > 0;
  auto truncated = full & (responses.select(1, R - 1) != eos_id);  // ... and the last one is not EOS
  return response_mask * (~truncated).unsqueeze(1).to(response_mask.scalar_type());
}

torch::Tensor groups_with_signal(const torch::Tensor& values, const torch::Tensor& group_ids) {
  TORCH_CHECK(values.dim() == 1 && values.sizes() == group_ids.sizes(), "groups_with_signal: values ", values.sizes(),
              " and group_ids ", group_ids.sizes(), " must be the same [B]");
  TORCH_CHECK(!group_ids.is_floating_point(), "groups_with_signal: group_ids must be an integer tensor");
  const torch::Tensor v = values.detach().to(torch::kFloat64), ids = group_ids.to(v.device(), torch::kLong);
  auto unique = torch::_unique2(ids, /*sorted=*/true, /*return_inverse=*/true, /*return_counts=*/false);
  const torch::Tensor inverse = std::get<1>(unique);  // [B] group index of each row
  const int64_t groups = std::get<0>(unique).size(0);
  const torch::Tensor high = torch::full({groups}, -INFINITY, v.options()).scatter_reduce(0, inverse, v, "amax");
  const torch::Tensor low = torch::full({groups}, INFINITY, v.options()).scatter_reduce(0, inverse, v, "amin");
  return (high > low).index_select(0, inverse) & (ids >= 0);
}

const std::vector<std::string>& filter_metric_names() {
  static const std::vector<std::string> names = {"acc", "score", "seq_reward"};
  return names;
}

std::vector<std::pair<std::string, torch::Tensor>> entropy_token_classes(const torch::Tensor& advantages,
                                                                         const torch::Tensor& response_mask,
                                                                         const torch::Tensor& correct,
                                                                         const torch::Tensor& has_correct) {
  check_bt(advantages, response_mask, "advantages");
  const torch::Tensor mask = response_mask.detach(), adv = advantages.detach();
  const auto as_mask = [&](const torch::Tensor& t) { return t.to(mask.scalar_type()) * mask; };
  std::vector<std::pair<std::string, torch::Tensor>> classes = {
      {"pos_adv", as_mask(adv > 0)}, {"neg_adv", as_mask(adv < 0)}, {"zero_adv", as_mask(adv == 0)}};
  if (!correct.defined()) return classes;
  TORCH_CHECK(correct.dim() == 1 && correct.size(0) == adv.size(0) && correct.sizes() == has_correct.sizes(),
              "entropy_token_classes: correct and has_correct must be [B] with B = ", adv.size(0));
  const torch::Tensor judged = has_correct.detach().to(mask.scalar_type()).unsqueeze(1);
  const torch::Tensor right = correct.detach().to(mask.scalar_type()).unsqueeze(1);
  classes.push_back({"correct", right * judged * mask});
  classes.push_back({"incorrect", (1 - right) * judged * mask});
  return classes;
}

// ----- KL --------------------------------------------------------------------------------------------------------

KlEstimator parse_kl_estimator(const std::string& name, const std::string& key) {
  return parse_named(kKlEstimators, name, key, "KL estimator");
}

std::vector<std::string> kl_estimator_names() {
  return names_of(kKlEstimators);
}

torch::Tensor kl_penalty(const torch::Tensor& log_prob, const torch::Tensor& ref_log_prob, KlEstimator estimator) {
  switch (estimator) {
    case KlEstimator::kK1:
      return log_prob - ref_log_prob;
    case KlEstimator::kAbs:
      return (log_prob - ref_log_prob).abs();
    case KlEstimator::kK2:
      return 0.5 * (log_prob - ref_log_prob).pow(2);
    case KlEstimator::kK3: {  // clamp the log-ratio for stability, then the estimate (veRL)
      auto kl = (ref_log_prob - log_prob).clamp(-20, 20);
      return (kl.exp() - kl - 1).clamp(-10, 10);
    }
  }
  TORCH_CHECK(false, "unreachable: unknown KlEstimator");
}

KlInReward apply_kl_in_reward(const torch::Tensor& token_scores, const torch::Tensor& old_log_prob,
                              const torch::Tensor& ref_log_prob, const torch::Tensor& response_mask,
                              const torch::Tensor& sample_mask, double kl_coef, KlEstimator estimator,
                              const SumReducer& reduce) {
  check_bt(token_scores, response_mask, "token_scores");
  torch::NoGradGuard no_grad;
  auto mask = mask_like(response_mask, old_log_prob);
  auto kl = kl_penalty(old_log_prob.detach(), ref_log_prob.detach(), estimator) * mask;  // [B, T]
  auto token_rewards = token_scores - kl_coef * kl;
  auto real = sample_mask.to(kl.device(), kl.scalar_type());  // [B]
  auto per_seq = kl.sum(1) / mask.sum(1).clamp_min(1);        // [B] masked mean per sequence
  auto local = torch::stack({(per_seq * real).sum(), real.sum()}).to(torch::kDouble);
  auto global = (reduce ? reduce(local) : local).to(torch::kCPU, torch::kDouble).contiguous();
  const double* s = global.data_ptr<double>();
  return {token_rewards, kl, s[0] / std::max(1.0, s[1]), s[1]};
}

// ----- losses ----------------------------------------------------------------------------------------------------

LossAggMode parse_loss_agg_mode(const std::string& name, const std::string& key) {
  return parse_named(kLossAggModes, name, key, "loss aggregation mode");
}

std::vector<std::string> loss_agg_mode_names() {
  return names_of(kLossAggModes);
}

double explained_var(const torch::Tensor& values, const torch::Tensor& returns, const torch::Tensor& mask,
                     const SumReducer& reduce) {
  torch::Tensor ret = returns.detach().to(torch::kFloat64), err = ret - values.detach().to(torch::kFloat64);
  torch::Tensor m = mask.to(ret.device(), torch::kFloat64);
  torch::Tensor local =
      torch::stack({m.sum(), (ret * m).sum(), (ret * ret * m).sum(), (err * m).sum(), (err * err * m).sum()});
  torch::Tensor global = (reduce ? reduce(local) : local).to(torch::kCPU, torch::kDouble).contiguous();
  const double* s = global.data_ptr<double>();
  const double n = s[0];
  const auto var = [n](double sum, double sq) { return n > 1 ? (sq - sum * sum / n) / (n - 1) : 0.0; };
  return 1.0 - var(s[3], s[4]) / (var(s[1], s[2]) + 1e-5);
}

// ----- rollout correction ---------------------------------------------------------------------------------------

RolloutGap rollout_gap(const torch::Tensor& old_log_prob, const torch::Tensor& rollout_log_prob,
                       const torch::Tensor& response_mask) {
  check_bt(old_log_prob, response_mask, "old_log_prob");
  check_bt(rollout_log_prob, response_mask, "rollout_log_prob");
  torch::NoGradGuard no_grad;
  auto old = old_log_prob.detach().to(torch::kDouble);
  auto rollout = rollout_log_prob.detach().to(old.device(), torch::kDouble);
  auto m = mask_like(response_mask, old);
  auto diff = (old.exp() - rollout.exp()).abs() * m;
  auto log_ratio = old - rollout;  // log pi_train / pi_rollout
  auto k3 = log_ratio.exp() - log_ratio - 1;
  auto sums =
      torch::stack({m.sum(), diff.sum(), diff.max(), (-log_ratio * m).sum(), (k3 * m).sum()}).cpu().contiguous();
  const double* v = sums.data_ptr<double>();
  return {v[0], v[1], v[2], v[3], v[4]};
}

torch::Tensor rollout_is_weights(const torch::Tensor& old_log_prob, const torch::Tensor& rollout_log_prob,
                                 const torch::Tensor& response_mask, RolloutIsLevel level, double upper, double lower) {
  check_bt(old_log_prob, response_mask, "old_log_prob");
  check_bt(rollout_log_prob, response_mask, "rollout_log_prob");
  usage_check(upper > 0, "algorithm.rollout_correction.rollout_is_threshold: the upper bound must be > 0, got " +
                             std::to_string(upper));
  usage_check(lower <= upper, "algorithm.rollout_correction.rollout_is_threshold: the lower bound " +
                                  std::to_string(lower) + " is above the upper bound " + std::to_string(upper));
  TORCH_CHECK(level != RolloutIsLevel::kOff, "rollout_is_weights: the level is off");
  torch::NoGradGuard no_grad;
  auto m = mask_like(response_mask, old_log_prob);
  auto log_ratio = old_log_prob.detach() - rollout_log_prob.detach().to(old_log_prob.device());
  if (level == RolloutIsLevel::kSequence) log_ratio = (log_ratio * m).sum(-1, /*keepdim=*/true).expand_as(m);
  auto w = log_ratio.clamp(-20.0, 20.0).exp() * m;
  if (lower <= 0) return w.clamp_max(upper);
  return torch::where((w >= lower) & (w <= upper), w, torch::zeros_like(w));
}

}  // namespace ppo
