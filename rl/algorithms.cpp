// PPO algorithms over tensors; see algorithms.h. Source: veRL verl/trainer/ppo/core_algos.py and
// verl/utils/torch_functional.py (Apache-2.0), re-expressed in LibTorch.
#include "rl/algorithms.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>

#include "common/error.h"

namespace ppo {

namespace {

// A registry: every name of a variant, in the order they are listed.
template <class E>
struct Named {
  const char* name;
  E value;
};

std::string join_names(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

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
  std::ostringstream valid;
  for (size_t i = 0; i < N; ++i) valid << (i ? ", " : "") << table[i].name;
  throw UsageError(key + ": unknown " + what + " '" + name + "'; valid: " + valid.str());
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

// The mask as a tensor of `like`'s dtype and device.
torch::Tensor mask_like(const torch::Tensor& mask, const torch::Tensor& like) {
  return mask.to(like.device(), like.scalar_type());
}

void check_bt(const torch::Tensor& t, const torch::Tensor& mask, const char* what) {
  TORCH_CHECK(t.dim() == 2 && t.sizes() == mask.sizes(), what, " must be [B, T] like response_mask ", mask.sizes(),
              ", got ", t.sizes());
}

// Per-sample group statistics of `scores` [B] for the outcome estimators: each sample's group mean, unbiased group
// std and group size, all [B]. Groups of one get mean 0 and std 1 (veRL). Two-pass variance in the scores' dtype.
struct GroupStats {
  torch::Tensor mean, std, size;  // [B] each
};
GroupStats group_stats(const torch::Tensor& scores, const torch::Tensor& group_ids) {
  TORCH_CHECK(group_ids.dim() == 1 && group_ids.size(0) == scores.size(0),
              "group_ids must be [B] with B = ", scores.size(0), ", got ", group_ids.sizes());
  TORCH_CHECK(!group_ids.is_floating_point(), "group_ids must be an integer tensor");
  auto ids = group_ids.to(scores.device(), torch::kLong);
  auto unique = torch::_unique2(ids, /*sorted=*/true, /*return_inverse=*/true, /*return_counts=*/true);
  auto inverse = std::get<1>(unique);                          // [B] group index of each sample
  auto counts = std::get<2>(unique).to(scores.scalar_type());  // [G]
  const int64_t num_groups = counts.size(0);

  auto sums = torch::zeros({num_groups}, scores.options()).index_add_(0, inverse, scores);
  auto group_mean = sums / counts;                                           // [G]
  auto centered_sq = (scores - group_mean.index_select(0, inverse)).pow(2);  // [B]
  auto sq_sums = torch::zeros({num_groups}, scores.options()).index_add_(0, inverse, centered_sq);
  auto group_std = (sq_sums / (counts - 1).clamp_min(1)).sqrt();  // [G] unbiased
  auto multi = counts > 1;
  group_mean = torch::where(multi, group_mean, torch::zeros_like(group_mean));
  group_std = torch::where(multi, group_std, torch::ones_like(group_std));
  return {group_mean.index_select(0, inverse), group_std.index_select(0, inverse), counts.index_select(0, inverse)};
}

// The outcome estimators' score of each response: the sum of its token rewards over all T positions (veRL). [B]
torch::Tensor outcome_scores(const torch::Tensor& token_rewards, const torch::Tensor& response_mask) {
  check_bt(token_rewards, response_mask, "token_rewards");
  return token_rewards.detach().sum(-1);
}

// Reverse scan helper: stacks per-column tensors collected back to front into [B, T].
torch::Tensor stack_reversed(std::vector<torch::Tensor>& columns) {
  std::reverse(columns.begin(), columns.end());
  return torch::stack(columns, /*dim=*/1);
}

}  // namespace

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

// ----- advantage estimators --------------------------------------------------------------------------------------

Advantages compute_gae(const torch::Tensor& token_rewards, const torch::Tensor& values,
                       const torch::Tensor& response_mask, double gamma, double lam, const SumReducer& reduce) {
  check_bt(token_rewards, response_mask, "token_rewards");
  check_bt(values, response_mask, "values");
  torch::NoGradGuard no_grad;
  auto vals = values.detach();
  auto rewards = token_rewards.to(vals.scalar_type());
  auto on = mask_like(response_mask, vals) > 0;  // [B, T] bool
  const int64_t T = vals.size(1);
  auto nextvalues = torch::zeros({vals.size(0)}, vals.options());  // [B]
  auto lastgaelam = torch::zeros({vals.size(0)}, vals.options());  // [B]
  std::vector<torch::Tensor> columns;
  columns.reserve(T);
  for (int64_t t = T - 1; t >= 0; --t) {
    auto v = vals.select(1, t), m = on.select(1, t);
    auto delta = rewards.select(1, t) + gamma * nextvalues - v;
    auto lastgaelam_t = delta + gamma * lam * lastgaelam;
    // veRL: x = new * mask + (1 - mask) * x, i.e. masked positions carry the state over unchanged.
    nextvalues = torch::where(m, v, nextvalues);
    lastgaelam = torch::where(m, lastgaelam_t, lastgaelam);
    columns.push_back(lastgaelam);
  }
  auto advantages = stack_reversed(columns);  // [B, T]
  auto returns = advantages + vals;           // [B, T]
  return {masked_whiten(advantages, response_mask, reduce), returns};
}

Advantages compute_grpo(const torch::Tensor& token_rewards, const torch::Tensor& response_mask,
                        const torch::Tensor& group_ids, bool norm_by_std, double epsilon) {
  torch::NoGradGuard no_grad;
  auto scores = outcome_scores(token_rewards, response_mask);  // [B]
  auto g = group_stats(scores, group_ids);
  auto adv = norm_by_std ? (scores - g.mean) / (g.std + epsilon) : scores - g.mean;  // [B]
  auto out = adv.unsqueeze(-1) * mask_like(response_mask, adv);                      // [B, T]
  return {out, out};
}

Advantages compute_rloo(const torch::Tensor& token_rewards, const torch::Tensor& response_mask,
                        const torch::Tensor& group_ids) {
  torch::NoGradGuard no_grad;
  auto scores = outcome_scores(token_rewards, response_mask);  // [B]
  auto g = group_stats(scores, group_ids);
  auto scale = g.size / (g.size - 1).clamp_min(1);  // n / (n - 1); unused for groups of one
  auto adv = torch::where(g.size > 1, scores * scale - g.mean * scale, scores);  // [B]
  auto out = adv.unsqueeze(-1) * mask_like(response_mask, adv);                  // [B, T]
  return {out, out};
}

Advantages compute_reinforce_plus_plus(const torch::Tensor& token_rewards, const torch::Tensor& response_mask,
                                       double gamma, const SumReducer& reduce) {
  check_bt(token_rewards, response_mask, "token_rewards");
  torch::NoGradGuard no_grad;
  auto rewards = token_rewards.detach();
  auto mask = mask_like(response_mask, rewards);
  const int64_t T = rewards.size(1);
  auto running = torch::zeros({rewards.size(0)}, rewards.options());  // [B]
  std::vector<torch::Tensor> columns;
  columns.reserve(T);
  for (int64_t t = T - 1; t >= 0; --t) {
    auto candidate = rewards.select(1, t) + gamma * running;
    columns.push_back(candidate);
    // Masked positions carry the return over unchanged, as GAE does: after EOS it stays 0 (veRL's reset), and over
    // a multi-turn trajectory's tool tokens it is neither discounted nor reset.
    running = torch::where(mask.select(1, t) > 0, candidate, running);
  }
  auto returns = stack_reversed(columns);  // [B, T]
  auto advantages = masked_whiten(returns, mask, reduce) * mask;
  return {advantages, returns};
}

Advantages compute_reinforce_plus_plus_baseline(const torch::Tensor& token_rewards, const torch::Tensor& response_mask,
                                                const torch::Tensor& group_ids, const SumReducer& reduce) {
  torch::NoGradGuard no_grad;
  auto scores = outcome_scores(token_rewards, response_mask);    // [B]
  auto centered = scores - group_stats(scores, group_ids).mean;  // groups of one: mean 0
  auto mask = mask_like(response_mask, centered);
  auto out = masked_whiten(centered.unsqueeze(-1) * mask, mask, reduce) * mask;  // [B, T]
  return {out, out};
}

Advantages compute_grpo_passk(const torch::Tensor& token_rewards, const torch::Tensor& response_mask,
                              const torch::Tensor& group_ids, bool norm_by_std, double epsilon) {
  torch::NoGradGuard no_grad;
  auto scores = outcome_scores(token_rewards, response_mask);  // [B]
  auto g = group_stats(scores, group_ids);
  usage_check(g.size.numel() == 0 || g.size.min().item<double>() >= 2,
              "algorithm.adv_estimator=grpo_passk needs at least 2 responses per prompt (rollout.n >= 2)");
  // Per group, in batch order: the first best response and the best score among the others (CPU, B is small).
  auto s = scores.to(torch::kCPU, torch::kDouble).contiguous();
  auto ids = group_ids.to(torch::kCPU, torch::kLong).contiguous();
  const double* sv = s.data_ptr<double>();
  const int64_t* iv = ids.data_ptr<int64_t>();
  const int64_t B = s.size(0);
  std::map<int64_t, int64_t> best;  // group -> row of its first best response
  for (int64_t i = 0; i < B; ++i) {
    auto it = best.find(iv[i]);
    if (it == best.end() || sv[i] > sv[it->second]) best[iv[i]] = i;
  }
  std::map<int64_t, double> second;  // group -> best score of the rows other than `best`
  for (int64_t i = 0; i < B; ++i) {
    if (best[iv[i]] == i) continue;
    auto it = second.find(iv[i]);
    if (it == second.end() || sv[i] > it->second) second[iv[i]] = sv[i];
  }
  auto std_cpu = g.std.to(torch::kCPU, torch::kDouble).contiguous();
  std::vector<double> adv(B, 0.0);
  for (const auto& [group, row] : best) {
    const double gap = sv[row] - second.at(group);
    adv[row] = norm_by_std ? gap / (std_cpu.data_ptr<double>()[row] + epsilon) : gap;
  }
  auto a = torch::tensor(adv, torch::kDouble).to(scores.device(), scores.scalar_type());  // [B]
  auto out = a.unsqueeze(-1) * mask_like(response_mask, a);                               // [B, T]
  return {out, out};
}

std::vector<std::string> adv_estimator_names() {
  std::vector<std::string> names;
  for (const AdvEstimatorSpec& e : adv_estimators()) names.push_back(e.name);
  return names;
}

const AdvEstimatorSpec& adv_estimator(const std::string& name, const std::string& key) {
  for (const AdvEstimatorSpec& e : adv_estimators())
    if (name == e.name) return e;
  throw UsageError(key + ": unknown estimator '" + name + "'; valid: " + join_names(adv_estimator_names()));
}

std::vector<std::string> policy_loss_names() {
  std::vector<std::string> names;
  for (const PolicyLossSpec& l : policy_losses()) names.push_back(l.name);
  return names;
}

const PolicyLossSpec& policy_loss_spec(const std::string& name, const std::string& key) {
  for (const PolicyLossSpec& l : policy_losses())
    if (name == l.name) return l;
  throw UsageError(key + ": unknown policy loss mode '" + name + "'; valid: " + join_names(policy_loss_names()));
}

KeyChoices variant_choices() {
  KeyChoices choices;
  for (const AdvEstimatorSpec& e : adv_estimators())
    choices["algorithm.adv_estimator"].push_back({e.name, std::string(e.help) + "; " + e.source});
  for (const PolicyLossSpec& l : policy_losses())
    choices["actor.policy_loss.loss_mode"].push_back({l.name, std::string(l.help) + "; " + l.source});
  return choices;
}

RolloutIsLevel parse_rollout_is_level(const std::string& name, const std::string& key) {
  return parse_named(kRolloutIsLevels, name, key, "importance-weight level");
}

std::vector<std::string> rollout_is_level_names() {
  return names_of(kRolloutIsLevels);
}

Advantages compute_advantages(const AdvEstimatorSpec& estimator, const AdvantageInputs& in) {
  TORCH_CHECK(!estimator.needs_critic || in.values.defined(), "adv_estimator '", estimator.name,
              "' needs critic values");
  TORCH_CHECK(estimator.min_group_size < 2 || in.group_ids.defined(), "adv_estimator '", estimator.name,
              "' needs group ids");
  return estimator.compute(in);
}

namespace {

SumReducer reducer_of(const AdvantageInputs& in) {
  return in.reduce ? in.reduce : local_reducer();
}

}  // namespace

const std::vector<AdvEstimatorSpec>& adv_estimators() {
  static const std::vector<AdvEstimatorSpec> rows = {
      {"gae",
       [](const AdvantageInputs& in) {
         return compute_gae(in.token_rewards, in.values, in.response_mask, in.gamma, in.lam, reducer_of(in));
       },
       /*needs_critic=*/true, /*min_group_size=*/1, "generalized advantage estimation with a critic",
       "Schulman et al. 2015, arXiv:1506.02438"},
      {"grpo",
       [](const AdvantageInputs& in) {
         return compute_grpo(in.token_rewards, in.response_mask, in.group_ids, in.norm_adv_by_std_in_grpo);
       },
       false, 2, "a response's score against its group's mean, over the group's std", "Shao et al. 2024"},
      {"reinforce_plus_plus",
       [](const AdvantageInputs& in) {
         return compute_reinforce_plus_plus(in.token_rewards, in.response_mask, in.gamma, reducer_of(in));
       },
       false, 1, "discounted return-to-go, whitened over the batch", "Hu 2025, arXiv:2501.03262"},
      {"rloo", [](const AdvantageInputs& in) { return compute_rloo(in.token_rewards, in.response_mask, in.group_ids); },
       false, 2, "a response's score against the mean of the others of its prompt", "Ahmadian et al. 2024"},
      {"reinforce_plus_plus_baseline",
       [](const AdvantageInputs& in) {
         return compute_reinforce_plus_plus_baseline(in.token_rewards, in.response_mask, in.group_ids, reducer_of(in));
       },
       false, 1, "the group's mean subtracted, then whitened over the batch",
       "Hu 2025; veRL, OpenRLHF reinforce_baseline"},
      {"grpo_passk",
       [](const AdvantageInputs& in) {
         return compute_grpo_passk(in.token_rewards, in.response_mask, in.group_ids, in.norm_adv_by_std_in_grpo);
       },
       false, 2, "only a prompt's best response learns, by its margin over the second best",
       "Chen et al. 2025, arXiv:2503.19595; veRL"},
  };
  return rows;
}

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
