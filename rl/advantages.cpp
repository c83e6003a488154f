// The advantage estimators and their registry (see algorithms.h). Source: veRL verl/trainer/ppo/core_algos.py
// (Apache-2.0), re-expressed in LibTorch.
#include "rl/algorithms.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "common/error.h"
#include "common/strings.h"
#include "rl/algorithms_internal.h"

namespace ppo {

namespace {

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
  return names_of(adv_estimators());
}

const AdvEstimatorSpec& adv_estimator(const std::string& name, const std::string& key) {
  return row_named(adv_estimators(), name, key, "estimator");
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

}  // namespace ppo
