// Tests of the advantage estimators (rl/advantages.cpp) and masked whitening: golden values worked out by hand
// (derivations in the comments) and equivalences (masked positions ignored, 2 simulated ranks == 1 rank).
// Tolerance: 1e-6 absolute on fp32 unless stated.
#include <catch2/catch.hpp>

#include <string>

#include "common/error.h"
#include "rl/algorithms.h"
#include "tests/rl/tensor_checks.h"

using ppo_test::check_close;
using ppo_test::check_scalar;
using ppo_test::f32;
using ppo_test::f32v;
using ppo_test::kTol;
using ppo_test::max_diff;
using ppo_test::run_two_ranks;

TEST_CASE("GAE golden with gamma, lam != 1 and a masked tail", "[cpu][algos]") {
  // gamma = lam = 0.5, so gamma * lam = 0.25. delta_t = r_t + gamma * V_{t+1} - V_t, A_t = delta_t + 0.25 A_{t+1}.
  // Row 0: r = [0, 0, 1], V = [0.5, 1, 2], mask [1, 1, 1]
  //   t=2: delta = 1 + 0 - 2 = -1                 A2 = -1
  //   t=1: delta = 0 + 0.5*2 - 1 = 0              A1 = 0 + 0.25*(-1) = -0.25
  //   t=0: delta = 0 + 0.5*1 - 0.5 = 0            A0 = 0.25*(-0.25) = -0.0625      returns = A + V = [.4375, .75, 1]
  // Row 1: r = [0, 2, 0], V = [1, 0, 5], mask [1, 1, 0]
  //   t=2 masked: state carried (nextvalues = 0, lastgaelam = 0), A2 = 0
  //   t=1: delta = 2 + 0.5*0 - 0 = 2              A1 = 2
  //   t=0: delta = 0 + 0.5*0 - 1 = -1             A0 = -1 + 0.25*2 = -0.5          returns = [0.5, 2, 5]
  // Whitening over the 5 masked-in values {-0.0625, -0.25, -1, -0.5, 2}: sum 0.1875, mean 0.0375,
  // deviations {-0.1, -0.2875, -1.0375, -0.5375, 1.9625}, squares sum 5.309375, unbiased var = 5.309375 / 4
  // = 1.32734375. Whitened = (A - 0.0375) / sqrt(1.32734375 + 1e-8) at EVERY position (veRL), so the masked one is
  // (0 - 0.0375) / std.
  auto rewards = f32({{0, 0, 1}, {0, 2, 0}});
  auto values = f32({{0.5, 1, 2}, {1, 0, 5}});
  auto mask = f32({{1, 1, 1}, {1, 1, 0}});
  auto out = ppo::compute_gae(rewards, values, mask, /*gamma=*/0.5, /*lam=*/0.5, ppo::local_reducer());

  auto raw = f32({{-0.0625, -0.25, -1}, {-0.5, 2, 0}});
  const double stdev = std::sqrt(1.32734375 + 1e-8);
  check_close(out.advantages, (raw - 0.0375) / stdev, kTol, "GAE whitened advantages");
  check_close(out.returns, f32({{0.4375, 0.75, 1}, {0.5, 2, 5}}), kTol, "GAE returns");
}

TEST_CASE("GAE carries state over a masked middle token", "[cpu][algos]") {
  // gamma = lam = 0.5, r = [0, 9, 1], V = [1, 7, 2], mask [1, 0, 1] (token 1 is e.g. an observation token).
  //   t=2: delta = 1 - 2 = -1, A2 = -1; state: nextvalues = 2, lastgaelam = -1
  //   t=1 masked: state unchanged, A1 = -1 (the reward 9 and value 7 are never used)
  //   t=0: delta = 0 + 0.5*2 - 1 = 0, A0 = 0.25 * (-1) = -0.25
  // returns = A + V = [0.75, 6, 1].
  auto out = ppo::compute_gae(f32({{0, 9, 1}}), f32({{1, 7, 2}}), f32({{1, 0, 1}}), 0.5, 0.5, ppo::local_reducer());
  check_close(out.returns, f32({{0.75, 6, 1}}), kTol, "returns");
}

TEST_CASE("GAE ignores values and rewards at masked positions", "[cpu][algos]") {
  torch::manual_seed(0);
  const int64_t B = 4, T = 7;
  auto rewards = torch::randn({B, T});
  auto values = torch::randn({B, T});
  // Masked tails of different lengths and one masked hole in the middle of row 2.
  auto mask = f32({{1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 0, 0, 0, 0}, {1, 1, 0, 1, 1, 0, 0}, {1, 0, 0, 0, 0, 0, 0}});
  auto a = ppo::compute_gae(rewards, values, mask, 0.9, 0.8, ppo::local_reducer());

  auto off = mask == 0;
  auto rewards2 = torch::where(off, torch::randn({B, T}) * 100, rewards);
  auto values2 = torch::where(off, torch::randn({B, T}) * 100, values);
  auto b = ppo::compute_gae(rewards2, values2, mask, 0.9, 0.8, ppo::local_reducer());

  check_close(a.advantages * mask, b.advantages * mask, kTol, "advantages at unmasked positions");
  check_close(a.returns * mask, b.returns * mask, kTol, "returns at unmasked positions");
  // The test can fail: changing an UNMASKED value does change the result.
  auto values3 = values.clone();
  values3.index_put_({0, 3}, values3.index({0, 3}) + 1.0);
  auto c = ppo::compute_gae(rewards, values3, mask, 0.9, 0.8, ppo::local_reducer());
  CHECK(max_diff(a.advantages * mask, c.advantages * mask) > 1e-3);
}

TEST_CASE("GAE over 2 simulated ranks equals GAE over the whole batch", "[cpu][algos]") {
  torch::manual_seed(1);
  auto rewards = torch::randn({6, 5});
  auto values = torch::randn({6, 5});
  auto mask = (torch::rand({6, 5}) > 0.3).to(torch::kFloat);
  mask.select(1, 0).fill_(1);
  auto whole = ppo::compute_gae(rewards, values, mask, 0.95, 0.9, ppo::local_reducer());
  auto halves = run_two_ranks([&](int r, const ppo::SumReducer& reduce) {
    auto rows = torch::indexing::Slice(r * 3, r * 3 + 3);
    return ppo::compute_gae(rewards.index({rows}), values.index({rows}), mask.index({rows}), 0.95, 0.9, reduce)
        .advantages;
  });
  check_close(torch::cat({halves.first, halves.second}), whole.advantages, kTol, "2-rank GAE advantages");
}

TEST_CASE("masked_whiten with a 2-rank reducer equals whitening the whole batch", "[cpu][algos]") {
  torch::manual_seed(2);
  auto values = torch::randn({6, 5}) * 3 + 1;
  auto mask = (torch::rand({6, 5}) > 0.4).to(torch::kFloat);
  mask.select(1, 0).fill_(1);

  // Reference: veRL's two-pass masked_whiten on the whole batch.
  auto mean = (values * mask).sum() / mask.sum();
  auto n = mask.sum();
  auto var = ((values - mean).pow(2) * mask).sum() / n * (n / (n - 1));
  auto want = (values - mean) * torch::rsqrt(var + 1e-8);

  check_close(ppo::masked_whiten(values, mask, ppo::local_reducer()), want, kTol, "one rank vs veRL two-pass");
  for (bool shift_mean : {true, false}) {
    auto halves = run_two_ranks([&](int r, const ppo::SumReducer& reduce) {
      auto rows = torch::indexing::Slice(r * 3, r * 3 + 3);
      return ppo::masked_whiten(values.index({rows}), mask.index({rows}), reduce, shift_mean);
    });
    auto expect = shift_mean ? want : want + mean;
    check_close(torch::cat({halves.first, halves.second}), expect, kTol,
                shift_mean ? "2 ranks, shift_mean" : "2 ranks, no shift_mean");
  }
  // Masked statistics only: the whitened masked-in values have mean 0 and unbiased variance 1.
  auto w = ppo::masked_whiten(values, mask, ppo::local_reducer());
  check_scalar(ppo::masked_mean(w, mask), 0.0, kTol, "whitened mean");
  check_scalar(ppo::masked_sum(w.pow(2), mask) / (mask.sum() - 1), 1.0, 1e-5, "whitened variance");

  CHECK_THROWS_AS(ppo::masked_whiten(values, torch::zeros_like(mask), ppo::local_reducer()), ppo::UsageError);
}

TEST_CASE("GRPO with and without std normalisation", "[cpu][algos]") {
  // Group ids [7, 7, 7, 3, 3, 5]; scores = sum of token rewards:
  //   group 7: scores {1, 0, 2} (row 0 as 0.5 + 0.5) -> mean 1, unbiased std sqrt((0 + 1 + 1) / 2) = 1
  //   group 3: scores {3, 1}                         -> mean 2, std sqrt((1 + 1) / 1) = sqrt(2)
  //   group 5: single score 4                        -> mean 0, std 1 (veRL)
  // with std: (s - mean) / (std + 1e-6); without: s - mean. Then times the mask (row 1 has a masked 2nd token).
  auto rewards = f32({{0.5, 0.5}, {0, 0}, {0, 2}, {0, 3}, {1, 0}, {0, 4}});
  auto mask = f32({{1, 1}, {1, 0}, {1, 1}, {1, 1}, {1, 1}, {1, 1}});
  auto ids = torch::tensor(std::vector<int64_t>{7, 7, 7, 3, 3, 5});
  const double e = 1e-6, s2 = std::sqrt(2.0);
  auto with_std = ppo::compute_grpo(rewards, mask, ids, /*norm_by_std=*/true);
  auto adv = f32v({0, -1 / (1 + e), 1 / (1 + e), 1 / (s2 + e), -1 / (s2 + e), 4 / (1 + e)});
  check_close(with_std.advantages, adv.unsqueeze(1) * mask, kTol, "GRPO (std)");
  check_close(with_std.returns, with_std.advantages, 0, "GRPO returns == advantages");

  auto no_std = ppo::compute_grpo(rewards, mask, ids, /*norm_by_std=*/false);
  check_close(no_std.advantages, f32v({0, -1, 1, 1, -1, 4}).unsqueeze(1) * mask, kTol, "GRPO (Dr. GRPO, no std)");
}

TEST_CASE("RLOO leave-one-out baseline", "[cpu][algos]") {
  // Same groups as the GRPO test. adv = n/(n-1) (s - mean) = s - mean of the others:
  //   group 7 (n=3, mean 1): 1.5 * {0, -1, 1} = {0, -1.5, 1.5}   (check: 0 - (1+2)/2 = -1.5)
  //   group 3 (n=2, mean 2): 2 * {1, -1} = {2, -2}                (check: 3 - 1 = 2)
  //   group 5 (n=1): raw score 4 (veRL leaves singletons unchanged)
  auto rewards = f32({{0.5, 0.5}, {0, 0}, {0, 2}, {0, 3}, {1, 0}, {0, 4}});
  auto mask = f32({{1, 1}, {1, 0}, {1, 1}, {1, 1}, {1, 1}, {1, 1}});
  auto ids = torch::tensor(std::vector<int64_t>{7, 7, 7, 3, 3, 5});
  auto out = ppo::compute_rloo(rewards, mask, ids);
  check_close(out.advantages, f32v({0, -1.5, 1.5, 2, -2, 4}).unsqueeze(1) * mask, kTol, "RLOO");
}

TEST_CASE("REINFORCE++ discounted returns, reset after EOS, whitened", "[cpu][algos]") {
  // gamma = 0.5. G_t = r_t + 0.5 G_{t+1}; after storing G_t the running return is multiplied by mask_t.
  // Row 0: r = [1, 0, 2], mask [1,1,1]: G = [1 + 0.5*1, 0 + 0.5*2, 2] = [1.5, 1, 2]
  // Row 1: r = [0, 4, 3], mask [1,1,0]: t=2 G = 3 (stored), running reset to 0; G1 = 4, G0 = 0.5*4 = 2 -> [2, 4, 3]
  // Whitening over {1.5, 1, 2, 2, 4}: mean 2.1, deviations {-0.6, -1.1, -0.1, -0.1, 1.9}, squares sum 5.2,
  // unbiased var 1.3; advantages = (G - 2.1) / sqrt(1.3 + 1e-8) * mask.
  auto rewards = f32({{1, 0, 2}, {0, 4, 3}});
  auto mask = f32({{1, 1, 1}, {1, 1, 0}});
  auto out = ppo::compute_reinforce_plus_plus(rewards, mask, /*gamma=*/0.5, ppo::local_reducer());
  auto returns = f32({{1.5, 1, 2}, {2, 4, 3}});
  check_close(out.returns, returns, kTol, "REINFORCE++ returns");
  check_close(out.advantages, (returns - 2.1) / std::sqrt(1.3 + 1e-8) * mask, kTol, "REINFORCE++ advantages");
}

TEST_CASE("REINFORCE++-baseline: group mean subtracted, then whitened over the batch", "[cpu][algos]") {
  // Same groups as the GRPO test, scores {1, 0, 2, 3, 1, 4}; group means 1 (group 7), 2 (group 3), and 0 for the
  // single response of group 5 (veRL), so the centred scores are {0, -1, 1, 1, -1, 4}. Spread over the 11 masked
  // tokens: 0, 0 | -1 | 1, 1 | 1, 1 | -1, -1 | 4, 4: sum 9, sum of squares 39, mean 9/11, unbiased variance
  // (39 - 11 (9/11)^2) / 10 = 348/110. advantages = (x - 9/11) / sqrt(348/110 + 1e-8) * mask = returns.
  auto rewards = f32({{0.5, 0.5}, {0, 0}, {0, 2}, {0, 3}, {1, 0}, {0, 4}});
  auto mask = f32({{1, 1}, {1, 0}, {1, 1}, {1, 1}, {1, 1}, {1, 1}});
  auto ids = torch::tensor(std::vector<int64_t>{7, 7, 7, 3, 3, 5});
  auto out = ppo::compute_reinforce_plus_plus_baseline(rewards, mask, ids, ppo::local_reducer());
  auto centred = f32v({0, -1, 1, 1, -1, 4}).unsqueeze(1).expand({6, 2});
  auto want = (centred - 9.0 / 11) / std::sqrt(348.0 / 110 + 1e-8) * mask;
  check_close(out.advantages, want, kTol, "REINFORCE++-baseline advantages");
  check_close(out.returns, out.advantages, 0, "returns == advantages");
  // Groups never straddle ranks; the whitening statistics are global, so 2 ranks give the 1-rank values.
  auto halves = run_two_ranks([&](int r, const ppo::SumReducer& reduce) {
    auto rows = torch::indexing::Slice(r * 3, r * 3 + 3);
    return ppo::compute_reinforce_plus_plus_baseline(rewards.index({rows}), mask.index({rows}), ids.index({rows}),
                                                     reduce)
        .advantages;
  });
  check_close(torch::cat({halves.first, halves.second}), want, kTol, "2-rank REINFORCE++-baseline");
}

TEST_CASE("GRPO pass@k: only each group's best response learns, by its margin over the second best", "[cpu][algos]") {
  // group 7: scores {1, 0, 2}: best row 2, margin 2 - 1 = 1, unbiased std 1      -> 1 / (1 + e)
  // group 3: scores {3, 1}:    best row 3, margin 2,         std sqrt(2)          -> 2 / (sqrt(2) + e)
  // group 5: scores {4, 4}:    a tie: the first (row 5) is best, margin 0          -> 0
  // every other row 0; without std the margins themselves. Row 1's masked token stays 0.
  auto rewards = f32({{0.5, 0.5}, {0, 0}, {0, 2}, {0, 3}, {1, 0}, {0, 4}, {4, 0}});
  auto mask = f32({{1, 1}, {1, 0}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}});
  auto ids = torch::tensor(std::vector<int64_t>{7, 7, 7, 3, 3, 5, 5});
  const double e = 1e-6;
  auto with_std = ppo::compute_grpo_passk(rewards, mask, ids, /*norm_by_std=*/true);
  check_close(with_std.advantages, f32v({0, 0, 1 / (1 + e), 2 / (std::sqrt(2.0) + e), 0, 0, 0}).unsqueeze(1) * mask,
              kTol, "pass@k (std)");
  check_close(with_std.returns, with_std.advantages, 0, "returns == advantages");
  auto no_std = ppo::compute_grpo_passk(rewards, mask, ids, /*norm_by_std=*/false);
  check_close(no_std.advantages, f32v({0, 0, 1, 2, 0, 0, 0}).unsqueeze(1) * mask, kTol, "pass@k (no std)");
  // A prompt with a single response has no second best (veRL raises).
  auto single = torch::tensor(std::vector<int64_t>{7, 7, 7, 3, 3, 5, 6});
  CHECK_THROWS_WITH(ppo::compute_grpo_passk(rewards, mask, single, true),
                    Catch::Matchers::Contains("at least 2 responses per prompt (rollout.n >= 2)"));
}

TEST_CASE("compute_advantages dispatches by name", "[cpu][algos]") {
  torch::manual_seed(3);
  ppo::AdvantageInputs in;
  in.token_rewards = torch::randn({4, 3});
  in.values = torch::randn({4, 3});
  in.response_mask = torch::ones({4, 3});
  in.group_ids = torch::tensor(std::vector<int64_t>{0, 0, 1, 1});
  in.gamma = 0.9;
  in.lam = 0.7;
  check_close(
      ppo::compute_advantages(ppo::adv_estimator("gae"), in).advantages,
      ppo::compute_gae(in.token_rewards, in.values, in.response_mask, 0.9, 0.7, ppo::local_reducer()).advantages, 0,
      "gae");
  check_close(ppo::compute_advantages(ppo::adv_estimator("grpo"), in).advantages,
              ppo::compute_grpo(in.token_rewards, in.response_mask, in.group_ids, true).advantages, 0, "grpo");
  check_close(ppo::compute_advantages(ppo::adv_estimator("rloo"), in).advantages,
              ppo::compute_rloo(in.token_rewards, in.response_mask, in.group_ids).advantages, 0, "rloo");
  check_close(
      ppo::compute_advantages(ppo::adv_estimator("reinforce_plus_plus"), in).advantages,
      ppo::compute_reinforce_plus_plus(in.token_rewards, in.response_mask, 0.9, ppo::local_reducer()).advantages, 0,
      "reinforce_plus_plus");
  CHECK(ppo::adv_estimator("gae").needs_critic);
  CHECK_FALSE(ppo::adv_estimator("grpo").needs_critic);
  CHECK_FALSE(ppo::adv_estimator("rloo").needs_critic);
  CHECK_FALSE(ppo::adv_estimator("reinforce_plus_plus").needs_critic);
  check_close(
      ppo::compute_advantages(ppo::adv_estimator("reinforce_plus_plus_baseline"), in).advantages,
      ppo::compute_reinforce_plus_plus_baseline(in.token_rewards, in.response_mask, in.group_ids, ppo::local_reducer())
          .advantages,
      0, "reinforce_plus_plus_baseline");
  check_close(ppo::compute_advantages(ppo::adv_estimator("grpo_passk"), in).advantages,
              ppo::compute_grpo_passk(in.token_rewards, in.response_mask, in.group_ids, true).advantages, 0,
              "grpo_passk");
  CHECK(ppo::adv_estimator("grpo_passk").min_group_size == 2);
  CHECK(ppo::adv_estimator("rloo").min_group_size == 2);
  CHECK(ppo::adv_estimator("grpo").min_group_size == 2);
  CHECK(ppo::adv_estimator("reinforce_plus_plus_baseline").min_group_size == 1);
  CHECK(ppo::adv_estimator("gae").min_group_size == 1);
  CHECK(ppo::adv_estimator_names() == std::vector<std::string>{"gae", "grpo", "reinforce_plus_plus", "rloo",
                                                               "reinforce_plus_plus_baseline", "grpo_passk"});
}
