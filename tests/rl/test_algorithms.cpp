// Tests of rl/algorithms (the advantage estimators are in test_advantages.cpp) and rl/kl_controller: golden values
// worked out by hand (derivations in the comments), equivalences (halves with a global denominator == whole) and the
// UsageError messages. Tolerance: 1e-6 absolute on fp32 unless stated.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "common/error.h"
#include "rl/algorithms.h"
#include "rl/kl_controller.h"
#include "rl/metrics.h"
#include "tests/rl/tensor_checks.h"
#include "workers/optimizer.h"

using ppo_test::check_close;
using ppo_test::check_scalar;
using ppo_test::f32;
using ppo_test::f32v;
using ppo_test::kTol;

TEST_CASE("DAPO overlong punishment: zero before the buffer, linear to -factor at the maximum length", "[cpu][algos]") {
  // max 10, buffer 4: expected length 6; lengths {3, 6, 7, 8, 10} exceed it by {-3, 0, 1, 2, 4}: penalties
  // min(0, -exceed / 4 * factor) = {0, 0, -0.25, -0.5, -1} with factor 1 and twice that with factor 2.
  auto lengths = f32v({3, 6, 7, 8, 10});
  check_close(ppo::overlong_penalty(lengths, 10, 4, 1.0), f32v({0, 0, -0.25, -0.5, -1}), kTol, "factor 1");
  check_close(ppo::overlong_penalty(lengths, 10, 4, 2.0), f32v({0, 0, -0.5, -1, -2}), kTol, "factor 2");
  // A buffer of the whole length: every token costs factor / max_length.
  check_close(ppo::overlong_penalty(lengths, 10, 10, 1.0), f32v({-0.3, -0.6, -0.7, -0.8, -1}), kTol, "whole");
  CHECK_THROWS(ppo::overlong_penalty(lengths, 10, 0, 1.0));
  CHECK_THROWS(ppo::overlong_penalty(lengths, 10, 11, 1.0));
}

TEST_CASE("mask_truncated: a response that used every position without EOS leaves the mask", "[cpu][algos]") {
  // eos = 2. Row 0 fills all 3 positions and ends in 6: truncated, masked out. Row 1 ended early (EOS at 1). Row 2
  // fills all 3 positions and its last token is EOS: it ended, kept.
  auto responses = torch::tensor(std::vector<int64_t>{5, 6, 6, 5, 2, 0, 5, 6, 2}).view({3, 3});
  auto mask = f32({{1, 1, 1}, {1, 1, 0}, {1, 1, 1}});
  check_close(ppo::mask_truncated(responses, mask, 2), f32({{0, 0, 0}, {1, 1, 0}, {1, 1, 1}}), 0, "mask");
}

TEST_CASE("groups_with_signal: DAPO keeps the groups whose responses differ", "[cpu][algos]") {
  // Groups (ids interleaved on purpose): 7 -> {1, 1, 1} all equal, dropped; 3 -> {0, 1} differ, kept; 5 -> {0.5}
  // alone, no signal; -2 (a padding copy) -> {0, 1} never kept; 9 -> {0.25, 0.25 + 1e-7} differ however little (veRL:
  // std > 0). Rows keep their own answer, whatever their order.
  auto values = torch::tensor(std::vector<double>{1, 0, 1, 0.5, 1, 0, 1, 0.25, 0.25 + 1e-7});
  auto ids = torch::tensor(std::vector<int64_t>{7, 3, 7, 5, 3, -2, -2, 9, 9});
  auto signal = ppo::groups_with_signal(values, ids);
  std::vector<bool> expected = {false, true, false, false, true, false, false, true, true};
  REQUIRE(signal.size(0) == 9);
  for (int64_t b = 0; b < 9; ++b) {
    INFO("row " << b);
    CHECK(signal[b].item<bool>() == expected[b]);
  }
  // A group of 0/1 accuracies that are all 0 or all 1 has no signal; int32 ids and float32 values work as well.
  auto acc = torch::tensor(std::vector<float>{0, 0, 1, 1, 0, 1});
  auto groups = torch::tensor(std::vector<int32_t>{0, 0, 1, 1, 2, 2});
  auto kept = ppo::groups_with_signal(acc, groups);
  CHECK(kept.sum().item<int64_t>() == 2);
  CHECK(kept[4].item<bool>());
  CHECK_THROWS(ppo::groups_with_signal(acc, groups.narrow(0, 0, 5)));
  CHECK_THROWS(ppo::groups_with_signal(acc, acc));
}

TEST_CASE("entropy_token_classes: tokens by advantage sign and by the response's correctness", "[cpu][algos]") {
  // Row 0 (correct): advantages [0.5, -1, 0] over 2 real tokens. Row 1 (wrong): [-0.2, 0, 0.3], 3 tokens. Row 2 (a
  // reward without correctness): [1, 1, 1], 1 token. Masked positions are in no class.
  auto adv = f32({{0.5, -1, 0}, {-0.2, 0, 0.3}, {1, 1, 1}});
  auto mask = f32({{1, 1, 0}, {1, 1, 1}, {1, 0, 0}});
  auto correct = torch::tensor(std::vector<float>{1, 0, 1});
  auto has_correct = torch::tensor(std::vector<float>{1, 1, 0});
  auto classes = ppo::entropy_token_classes(adv, mask, correct, has_correct);
  REQUIRE(classes.size() == 5);
  const std::vector<std::string> names = {"pos_adv", "neg_adv", "zero_adv", "correct", "incorrect"};
  const std::vector<torch::Tensor> expected = {
      f32({{1, 0, 0}, {0, 0, 1}, {1, 0, 0}}), f32({{0, 1, 0}, {1, 0, 0}, {0, 0, 0}}),
      f32({{0, 0, 0}, {0, 1, 0}, {0, 0, 0}}), f32({{1, 1, 0}, {0, 0, 0}, {0, 0, 0}}),
      f32({{0, 0, 0}, {1, 1, 1}, {0, 0, 0}})};
  for (size_t i = 0; i < 5; ++i) {
    CHECK(classes[i].first == names[i]);
    check_close(classes[i].second, expected[i], 0, names[i].c_str());
  }
  // The advantage classes partition the real tokens.
  check_close(classes[0].second + classes[1].second + classes[2].second, mask, 0, "partition");
  // Without correctness, the advantage classes only.
  CHECK(ppo::entropy_token_classes(adv, mask, torch::Tensor(), torch::Tensor()).size() == 3);
  CHECK_THROWS(ppo::entropy_token_classes(adv, mask, correct.narrow(0, 0, 2), has_correct));
}

TEST_CASE("Metrics: an empty mean is NaN, an empty optional mean is left out, add_value adds up", "[cpu][algos]") {
  ppo::Metrics m;
  m.add_mean("always", 0, 0);
  m.add_mean_if_any("never", 0, 0);
  m.add_mean_if_any("some", 1, 1);
  m.add_mean_if_any("some", 2, 1);
  m.add_value("timing_s/gen", 0.25);
  m.add_value("timing_s/gen", 0.5);
  const auto out = m.reduce(ppo::Context::get());
  CHECK(std::isnan(out.at("always")));
  CHECK(out.count("never") == 0);
  CHECK(out.at("some") == 1.5);
  CHECK(out.at("timing_s/gen") == 0.75);
}

TEST_CASE("KL estimators", "[cpu][algos]") {
  // lp - ref = [0.5, -1]; x = ref - lp = [-0.5, 1].
  //   kl:   [0.5, -1]   abs: [0.5, 1]   mse: 0.5 * [0.25, 1] = [0.125, 0.5]
  //   low_var_kl: exp(x) - x - 1 = [exp(-0.5) - 0.5, e - 2] = [0.1065306597, 0.7182818285]
  // Clamps: lp=0, ref=-30: x = -30 -> -20, exp(-20) + 19 = 19.0000... -> 10; lp=-30, ref=0: x -> 20, huge -> 10.
  auto lp = f32({{-1, -2, 0, -30}});
  auto ref = f32({{-1.5, -1, -30, 0}});
  auto first2 = [](const torch::Tensor& t) {
    return t.index({torch::indexing::Slice(), torch::indexing::Slice(0, 2)});
  };
  check_close(first2(ppo::kl_penalty(lp, ref, ppo::parse_kl_estimator("kl"))), f32({{0.5, -1}}), kTol, "kl");
  check_close(first2(ppo::kl_penalty(lp, ref, ppo::parse_kl_estimator("abs"))), f32({{0.5, 1}}), kTol, "abs");
  check_close(first2(ppo::kl_penalty(lp, ref, ppo::parse_kl_estimator("mse"))), f32({{0.125, 0.5}}), kTol, "mse");
  check_close(ppo::kl_penalty(lp, ref, ppo::parse_kl_estimator("low_var_kl")),
              f32({{std::exp(-0.5) - 0.5, std::exp(1.0) - 2, 10, 10}}), kTol, "low_var_kl");
  check_close(ppo::kl_penalty(lp, ref, ppo::parse_kl_estimator("k1")),
              ppo::kl_penalty(lp, ref, ppo::parse_kl_estimator("kl")), 0, "k1 alias");
  check_close(ppo::kl_penalty(lp, ref, ppo::parse_kl_estimator("k2")),
              ppo::kl_penalty(lp, ref, ppo::parse_kl_estimator("mse")), 0, "k2 alias");
  check_close(ppo::kl_penalty(lp, ref, ppo::parse_kl_estimator("k3")),
              ppo::kl_penalty(lp, ref, ppo::parse_kl_estimator("low_var_kl")), 0, "k3 alias");
}

TEST_CASE("KL in the reward", "[cpu][algos]") {
  // old - ref = [[0.2, 0.4, 5], [0.3, 0.3, 0.3]], mask [[1,1,0],[1,1,1]], type kl, coef 0.1:
  //   masked kl = [[0.2, 0.4, 0], [0.3, 0.3, 0.3]]; rewards = scores - 0.1 kl;
  //   per-sequence mean kl = [0.3, 0.3] -> current_kl = 0.3.
  auto ref = f32({{-1, -1, -1}, {-2, -2, -2}});
  auto old = ref + f32({{0.2, 0.4, 5}, {0.3, 0.3, 0.3}});
  auto mask = f32({{1, 1, 0}, {1, 1, 1}});
  auto scores = f32({{0, 0, 0}, {0, 0, 1}});
  auto out = ppo::apply_kl_in_reward(scores, old, ref, mask, torch::ones({2}), 0.1, ppo::KlEstimator::kK1,
                                     ppo::local_reducer());
  check_close(out.kl, f32({{0.2, 0.4, 0}, {0.3, 0.3, 0.3}}), kTol, "masked kl");
  check_close(out.token_rewards, f32({{-0.02, -0.04, 0}, {-0.03, -0.03, 0.97}}), kTol, "token rewards");
  CHECK(std::abs(out.current_kl - 0.3) <= kTol);
  CHECK(out.num_sequences == 2);
  // A padding copy (sample_mask 0) does not count: with row 1's KL at 0.9, the mean over real rows is row 0's 0.3.
  auto padded = ppo::apply_kl_in_reward(scores, ref + f32({{0.2, 0.4, 5}, {0.9, 0.9, 0.9}}), ref, mask, f32v({1, 0}),
                                        0.1, ppo::KlEstimator::kK1, ppo::local_reducer());
  CHECK(std::abs(padded.current_kl - 0.3) <= kTol);
  CHECK(padded.num_sequences == 1);
}

TEST_CASE("policy loss: clipping on both sides, dual-clip, both advantage signs", "[cpu][algos]") {
  // clip_ratio_low = 0.2, high = 0.3 -> ratio clipped to [0.8, 1.3]; clip_ratio_c = 3. old = 0, lp = log(ratio).
  // l1 = -A r, l2 = -A clip(r), l = max(l1, l2); for A < 0: l = min(l, -3 A).
  //  a) A=+1, r=1.5: l1 -1.5, l2 -1.3 -> -1.3 (clipped, upper)            grad wrt lp: 0
  //  b) A=+1, r=0.5: l1 -0.5, l2 -0.8 -> -0.5 (not clipped)               grad: -A r = -0.5
  //  c) A=-1, r=0.5: l1  0.5, l2  0.8 ->  0.8 (clipped, lower); -3A = 3   grad: 0
  //  d) A=-1, r=5  : l1  5,   l2  1.3 ->  5; min(5, 3) = 3 (dual-clip)    grad: 0
  //  e) A=-2, r=1.1: l1 = l2 = 2.2 -> 2.2; -3A = 6 > 2.2                  grad: -A r = 2.2
  //  f) masked: A=+1, r=10
  // token-mean over 5: (-1.3 - 0.5 + 0.8 + 3 + 2.2) / 5 = 0.84; clipfrac = 2/5 (a, c); clipfrac_lower = 1/5 (d);
  // ppo_kl = mean(old - lp) = -ln(1.5 * 0.5 * 0.5 * 5 * 1.1) / 5 = -ln(2.0625) / 5; grads divided by 5.
  auto old = torch::zeros({1, 6});
  auto lp = torch::log(f32({{1.5, 0.5, 0.5, 5, 1.1, 10}})).requires_grad_(true);
  auto adv = f32({{1, 1, -1, -1, -2, 1}});
  auto mask = f32({{1, 1, 1, 1, 1, 0}});
  ppo::PolicyLossParams p;
  p.clip_ratio_low = 0.2;
  p.clip_ratio_high = 0.3;
  p.clip_ratio_c = 3.0;
  auto out = ppo::policy_loss(old, lp, adv, mask, p);
  check_scalar(out.loss, 0.84, kTol, "pg loss");
  check_scalar(out.clipfrac, 0.4, kTol, "clipfrac");
  check_scalar(out.clipfrac_lower, 0.2, kTol, "clipfrac_lower");
  check_scalar(out.ppo_kl, -std::log(2.0625) / 5, kTol, "ppo_kl");
  out.loss.backward();
  check_close(lp.grad(), f32({{0, -0.5 / 5, 0, 0, 2.2 / 5, 0}}), kTol, "d loss / d log_prob");

  // The log-ratio is clamped to [-20, 20]: ppo_kl of a single token with lp - old = 25 is -20.
  auto big = ppo::policy_loss(torch::zeros({1, 1}), f32({{25}}), f32({{1}}), f32({{1}}), p);
  check_scalar(big.ppo_kl, -20, kTol, "clamped ppo_kl");
  // A global denominator: the same tokens counted as part of a 10-token mini-batch give half the loss.
  p.denominator = 10;
  check_scalar(ppo::policy_loss(old, lp.detach(), adv, mask, p).loss, 0.42, kTol, "pg loss, denominator 10");
  p.clip_ratio_c = 1.0;
  CHECK_THROWS_AS(ppo::policy_loss(old, lp, adv, mask, p), ppo::UsageError);
}

TEST_CASE("policy loss gspo: one clipped ratio per sequence, gradient = ratio x mean token gradient", "[cpu][algos]") {
  // clip [0.8, 1.3]; A = +1 on both rows; old = 0 so lp is the token log-ratio.
  //  row 0: log-ratios {0.1, 0.3}, third token masked: s = exp(0.2) = 1.2214 < 1.3, not clipped: loss -s per token,
  //         d loss / d lp_t = -s (s_i * exp(lp - sg(lp)) in value is s_i, in gradient s_i * d lp).
  //  row 1: log-ratios {0.5, 0.7} (masked third 9 ignored): s = exp(0.6) = 1.8221 -> clipped to 1.3: loss -1.3,
  //         gradient 0.
  // token-mean over 4 tokens: (-2 exp(0.2) - 2.6) / 4; clipfrac 2/4; clipfrac_lower 0; ppo_kl = -(1.6) / 4 = -0.4.
  auto old = torch::zeros({2, 3});
  auto lp = f32({{0.1, 0.3, 5}, {0.5, 0.7, 9}}).requires_grad_(true);
  auto adv = f32({{1, 1, 1}, {1, 1, 1}});
  auto mask = f32({{1, 1, 0}, {1, 1, 0}});
  ppo::PolicyLossParams p;
  p.loss = &ppo::policy_loss_spec("gspo");
  p.clip_ratio_low = 0.2;
  p.clip_ratio_high = 0.3;
  auto out = ppo::policy_loss(old, lp, adv, mask, p);
  const double s0 = std::exp(0.2);
  check_scalar(out.loss, (-2 * s0 - 2.6) / 4, kTol, "gspo loss");
  check_scalar(out.clipfrac, 0.5, kTol, "gspo clipfrac");
  check_scalar(out.clipfrac_lower, 0, 0, "gspo clipfrac_lower");
  check_scalar(out.ppo_kl, -0.4, kTol, "gspo ppo_kl");
  out.loss.backward();
  check_close(lp.grad(), f32({{-s0 / 4, -s0 / 4, 0}, {0, 0, 0}}), kTol, "gspo d loss / d log_prob");

  // With one token per sequence and A > 0 (no dual-clip), the sequence ratio is the token ratio: gspo == vanilla.
  auto one_lp = f32({{0.4}, {-0.1}, {0.05}}), one_adv = f32({{1}, {2}, {0.5}}), one_mask = f32({{1}, {1}, {1}});
  auto gspo = ppo::policy_loss(torch::zeros({3, 1}), one_lp, one_adv, one_mask, p);
  p.loss = &ppo::policy_loss_spec("vanilla");
  auto vanilla = ppo::policy_loss(torch::zeros({3, 1}), one_lp, one_adv, one_mask, p);
  check_scalar(gspo.loss, vanilla.loss.item<double>(), kTol, "gspo == vanilla on one-token sequences");
}

TEST_CASE("policy loss cispo: clipped, stop-gradient importance weight times A log-prob", "[cpu][algos]") {
  // p_new {0.6, 0.1, 0.55}, p_old {0.4, 0.2, 0.5}: ratios {1.5, 0.5, 1.1}, clipped to [0.8, 1.3]: w {1.3, 0.8, 1.1};
  // A {1, -1, 2}; a fourth token masked. loss_t = -w A lp: -1.3 ln 0.6, +0.8 ln 0.1, -2.2 ln 0.55; token-mean over
  // 3. d loss / d lp = -w A / 3 (the weight carries no gradient). clipfrac 2/3 (tokens 0 and 1);
  // ppo_kl = -(ln 1.5 + ln 0.5 + ln 1.1) / 3.
  auto old = torch::log(f32({{0.4, 0.2, 0.5, 0.5}}));
  auto lp = torch::log(f32({{0.6, 0.1, 0.55, 0.9}})).detach().requires_grad_(true);
  auto adv = f32({{1, -1, 2, 1}});
  auto mask = f32({{1, 1, 1, 0}});
  ppo::PolicyLossParams p;
  p.loss = &ppo::policy_loss_spec("cispo");
  p.clip_ratio_low = 0.2;
  p.clip_ratio_high = 0.3;
  auto out = ppo::policy_loss(old, lp, adv, mask, p);
  const double want = (-1.3 * std::log(0.6) + 0.8 * std::log(0.1) - 2.2 * std::log(0.55)) / 3;
  check_scalar(out.loss, want, kTol, "cispo loss");
  check_scalar(out.clipfrac, 2.0 / 3, kTol, "cispo clipfrac");
  check_scalar(out.clipfrac_lower, 0, 0, "cispo clipfrac_lower");
  check_scalar(out.ppo_kl, -(std::log(1.5) + std::log(0.5) + std::log(1.1)) / 3, kTol, "cispo ppo_kl");
  out.loss.backward();
  check_close(lp.grad(), f32({{-1.3 / 3, 0.8 / 3, -2.2 / 3, 0}}), kTol, "cispo d loss / d log_prob");
}

TEST_CASE("rollout correction: gap metrics, truncated and masked weights at token and sequence level", "[cpu][algos]") {
  // Gap: old = ln {0.5, 0.25}, rollout = ln {0.4, 0.25}, a third token masked (rollout far off there).
  //  probs diff {0.1, 0}: sum 0.1, max 0.1; kl = sum (rollout - old) = ln 0.8;
  //  k3 with r = pi_train / pi_rollout = 1.25 on the first token: 1.25 - ln 1.25 - 1; 0 on the second.
  auto old = torch::log(f32({{0.5, 0.25, 0.5}}));
  auto rollout = torch::log(f32({{0.4, 0.25, 0.01}}));
  auto mask = f32({{1, 1, 0}});
  ppo::RolloutGap gap = ppo::rollout_gap(old, rollout, mask);
  CHECK(gap.tokens == 2);
  CHECK(gap.probs_diff_sum == Approx(0.1).margin(1e-7));
  CHECK(gap.probs_diff_max == Approx(0.1).margin(1e-7));
  CHECK(gap.kl_sum == Approx(std::log(0.8)).margin(1e-7));
  CHECK(gap.k3_kl_sum == Approx(0.25 - std::log(1.25)).margin(1e-7));

  // Weights: pi_train / pi_rollout per token {3, 0.5, 1.2}, a fourth token masked.
  auto o = torch::log(f32({{0.6, 0.1, 0.6, 0.3}}));
  auto r = torch::log(f32({{0.2, 0.2, 0.5, 0.01}}));
  auto m = f32({{1, 1, 1, 0}});
  using L = ppo::RolloutIsLevel;
  // TIS at token level, cap 2: {2, 0.5, 1.2, 0}.
  check_close(ppo::rollout_is_weights(o, r, m, L::kToken, 2.0), f32({{2, 0.5, 1.2, 0}}), kTol, "token TIS");
  // Masking (IcePop) at token level, keep [0.8, 2]: {0, 0, 1.2, 0}.
  check_close(ppo::rollout_is_weights(o, r, m, L::kToken, 2.0, 0.8), f32({{0, 0, 1.2, 0}}), kTol, "token mask");
  // Sequence level: the product 3 * 0.5 * 1.2 = 1.8 on every real token; cap 2 keeps it, cap 1.5 truncates it,
  // the window [0.5, 1.6] masks the whole sequence.
  check_close(ppo::rollout_is_weights(o, r, m, L::kSequence, 2.0), f32({{1.8, 1.8, 1.8, 0}}), kTol, "seq TIS");
  check_close(ppo::rollout_is_weights(o, r, m, L::kSequence, 1.5), f32({{1.5, 1.5, 1.5, 0}}), kTol, "seq TIS cap");
  check_close(ppo::rollout_is_weights(o, r, m, L::kSequence, 1.6, 0.5), f32({{0, 0, 0, 0}}), kTol, "seq mask");
  CHECK_THROWS_AS(ppo::rollout_is_weights(o, r, m, L::kToken, 0.0), ppo::UsageError);
  CHECK_THROWS_AS(ppo::rollout_is_weights(o, r, m, L::kToken, 1.0, 2.0), ppo::UsageError);

  // The weights enter each mode's token losses: equal log-probs give weights 1 and the loss without correction; a
  // planted offset rollout = old - 0.1 on every token gives weights exp(0.1) and the loss times exp(0.1).
  torch::manual_seed(5);
  auto lp = torch::randn({3, 4}) * 0.1 - 1, old_lp = torch::randn({3, 4}) * 0.1 - 1, adv = torch::randn({3, 4});
  auto mk = f32({{1, 1, 1, 1}, {1, 1, 0, 0}, {1, 0, 0, 0}});
  for (const ppo::PolicyLossSpec& loss : ppo::policy_losses()) {
    INFO(loss.name);
    ppo::PolicyLossParams p;
    p.loss = &loss;
    const double plain = ppo::policy_loss(old_lp, lp, adv, mk, p).loss.item<double>();
    p.rollout_is_weights = ppo::rollout_is_weights(old_lp, old_lp, mk, L::kToken, 2.0);
    check_scalar(ppo::policy_loss(old_lp, lp, adv, mk, p).loss, plain, 0, "weights of 1");
    p.rollout_is_weights = ppo::rollout_is_weights(old_lp, old_lp - 0.1, mk, L::kToken, 2.0);
    check_scalar(ppo::policy_loss(old_lp, lp, adv, mk, p).loss, plain * std::exp(0.1), kTol, "offset 0.1");
  }
}

TEST_CASE("value loss with clipping", "[cpu][algos]") {
  // cliprange 0.5, v clipped to [old - 0.5, old + 0.5]; loss = 0.5 * token-mean(max((v-R)^2, (vclip-R)^2)).
  //  a) v=2,   old=1, R=3: vclip 1.5, l1 = 1, l2 = 2.25 -> 2.25 (clipped)
  //  b) v=2,   old=1, R=1: vclip 1.5, l1 = 1, l2 = 0.25 -> 1
  //  c) v=0.2, old=0, R=0: inside, l1 = l2 = 0.04 -> 0.04
  //  d) masked v=100
  // loss = 0.5 * (2.25 + 1 + 0.04) / 3 = 0.548333..., clipfrac = 1/3.
  auto v = f32({{2, 2, 0.2, 100}});
  auto old = f32({{1, 1, 0, 0}});
  auto ret = f32({{3, 1, 0, 0}});
  auto mask = f32({{1, 1, 1, 0}});
  auto out = ppo::value_loss(v, ret, old, mask, 0.5, ppo::LossAggMode::kTokenMean);
  check_scalar(out.loss, 0.5 * 3.29 / 3, kTol, "vf loss");
  check_scalar(out.clipfrac, 1.0 / 3, kTol, "vf clipfrac");
}

TEST_CASE("loss aggregation modes and global denominators", "[cpu][algos]") {
  // loss [[1,2,3],[4,5,6]], mask [[1,1,1],[1,1,0]]: token sums S = [6, 9], token counts [3, 2].
  //   token-mean              (6 + 9) / 5 = 3
  //   seq-mean-token-sum      (6 + 9) / 2 = 7.5
  //   seq-mean-token-mean     (6/3 + 9/2) / 2 = 3.25
  //   seq-mean-token-sum-norm (6/4 + 9/4) / 2 = 1.875   (norm_length 4)
  auto loss = f32({{1, 2, 3}, {4, 5, 6}});
  auto mask = f32({{1, 1, 1}, {1, 1, 0}});
  check_scalar(ppo::agg_loss(loss, mask, ppo::parse_loss_agg_mode("token-mean")), 3, kTol, "token-mean");
  check_scalar(ppo::agg_loss(loss, mask, ppo::parse_loss_agg_mode("seq-mean-token-sum")), 7.5, kTol,
               "seq-mean-token-sum");
  check_scalar(ppo::agg_loss(loss, mask, ppo::parse_loss_agg_mode("seq-mean-token-mean")), 3.25, kTol,
               "seq-mean-token-mean");
  check_scalar(ppo::agg_loss(loss, mask, ppo::parse_loss_agg_mode("seq-mean-token-sum-norm"), -1, 4), 1.875, kTol,
               "seq-mean-token-sum-norm");

  // Halves with the global denominator sum to the whole (uneven masks, so local means would not).
  torch::manual_seed(4);
  auto big = torch::randn({6, 5});
  auto bmask = (torch::rand({6, 5}) > 0.5).to(torch::kFloat);
  bmask.select(1, 0).fill_(1);
  bmask.index_put_({torch::indexing::Slice(0, 3)}, 1.0);  // first half full, second half sparse
  const double tokens = bmask.sum().item<double>();
  for (const auto& name : ppo::loss_agg_mode_names()) {
    const ppo::LossAggMode mode = ppo::parse_loss_agg_mode(name);
    const double denom = mode == ppo::LossAggMode::kTokenMean ? tokens : 6.0;
    auto whole = ppo::agg_loss(big, bmask, mode, -1, 5);
    auto rows0 = torch::indexing::Slice(0, 3), rows1 = torch::indexing::Slice(3, 6);
    auto sum = ppo::agg_loss(big.index({rows0}), bmask.index({rows0}), mode, denom, 5) +
               ppo::agg_loss(big.index({rows1}), bmask.index({rows1}), mode, denom, 5);
    check_scalar(sum, whole.item<double>(), kTol, "halves with global denominator: " + name);
  }
  // The check can fail: with LOCAL token means the halves' average differs from the whole.
  auto local_avg =
      0.5 * (ppo::agg_loss(big.index({torch::indexing::Slice(0, 3)}), bmask.index({torch::indexing::Slice(0, 3)}),
                           ppo::parse_loss_agg_mode("token-mean")) +
             ppo::agg_loss(big.index({torch::indexing::Slice(3, 6)}), bmask.index({torch::indexing::Slice(3, 6)}),
                           ppo::parse_loss_agg_mode("token-mean")));
  CHECK(std::abs(local_avg.item<double>() -
                 ppo::agg_loss(big, bmask, ppo::parse_loss_agg_mode("token-mean")).item<double>()) > 1e-4);
}

TEST_CASE("explained variance", "[cpu][algos]") {
  // returns [1, 2, 3], values [1, 2, 2] (4th token masked): diff [0, 0, 1], unbiased var 1/3; var(returns) = 1.
  // explained var = 1 - (1/3) / (1 + 1e-5).
  const double ev =
      ppo::explained_var(f32({{1, 2, 2, 50}}), f32({{1, 2, 3, -50}}), f32({{1, 1, 1, 0}}), ppo::local_reducer());
  CHECK(std::abs(ev - (1 - (1.0 / 3) / (1 + 1e-5))) <= kTol);
  // Over two "ranks" (a reducer that adds the other half's moments), the same as over the whole batch.
  const auto values = f32({{1, 2, 2, 50}, {4, 0, 1, 7}}), returns = f32({{1, 2, 3, -50}, {3, 1, 1, 9}});
  const auto mask = f32({{1, 1, 1, 0}, {1, 1, 0, 1}});
  const double whole = ppo::explained_var(values, returns, mask, ppo::local_reducer());
  const auto other = [&](int row) {
    return [&, row](const torch::Tensor& local) {
      torch::Tensor m = mask[row].unsqueeze(0).to(torch::kFloat64), r = returns[row].unsqueeze(0).to(torch::kFloat64);
      torch::Tensor e = r - values[row].unsqueeze(0).to(torch::kFloat64);
      return local + torch::stack({m.sum(), (r * m).sum(), (r * r * m).sum(), (e * m).sum(), (e * e * m).sum()});
    };
  };
  const auto rows = [&](int row) { return torch::indexing::Slice(row, row + 1); };
  CHECK(
      std::abs(ppo::explained_var(values.index({rows(0)}), returns.index({rows(0)}), mask.index({rows(0)}), other(1)) -
               whole) <= 1e-12);
}

TEST_CASE("adaptive and fixed KL controllers", "[cpu][algos]") {
  // value 0.1, target 0.05, horizon 1000, n_steps 100 -> value *= 1 + clip(kl/0.05 - 1, +-0.2) * 0.1
  //   kl 0.055: err 0.1  -> x1.01 -> 0.101
  //   kl 1.0:   err 19 -> 0.2 (clipped) -> x1.02
  //   kl 0:     err -1 -> -0.2 (clipped) -> x0.98
  auto c = ppo::make_kl_controller("adaptive", 0.1, 0.05, 1000);
  c.update(0.055, 100);
  CHECK(std::abs(c.value - 0.101) < 1e-12);
  c.update(1.0, 100);
  CHECK(std::abs(c.value - 0.101 * 1.02) < 1e-12);
  c.update(0.0, 100);
  CHECK(std::abs(c.value - 0.101 * 1.02 * 0.98) < 1e-12);
  auto f = ppo::make_kl_controller("fixed", 0.1, 0.05, 1000);
  f.update(1.0, 100);
  CHECK(f.value == 0.1);
  CHECK_THROWS_AS(ppo::make_kl_controller("adaptive", 0.1, 0.05, 0), ppo::UsageError);
}

TEST_CASE("bad names throw UsageError listing the valid names", "[cpu][algos]") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_AS(ppo::adv_estimator("ppo"), ppo::UsageError);
  CHECK_THROWS_WITH(ppo::adv_estimator("ppo"),
                    "algorithm.adv_estimator: unknown estimator 'ppo'; valid: gae, grpo, reinforce_plus_plus, rloo, "
                    "reinforce_plus_plus_baseline, grpo_passk");
  CHECK_THROWS_WITH(ppo::policy_loss_spec("gpo"),
                    "actor.policy_loss.loss_mode: unknown policy loss mode 'gpo'; valid: vanilla, gspo, cispo");
  CHECK_THROWS_WITH(ppo::parse_rollout_is_level("seq"), Contains("algorithm.rollout_correction.rollout_is") &&
                                                            Contains("'seq'") && Contains("off, token, sequence"));
  CHECK_THROWS_WITH(
      ppo::parse_kl_estimator("full", "actor.kl_loss_type"),
      Contains("actor.kl_loss_type") && Contains("'full'") && Contains("kl, k1, abs, mse, k2, low_var_kl, k3"));
  CHECK_THROWS_WITH(ppo::parse_loss_agg_mode("token-sum"),
                    Contains("'token-sum'") &&
                        Contains("token-mean, seq-mean-token-sum, seq-mean-token-mean, seq-mean-token-sum-norm"));
  CHECK_THROWS_WITH(ppo::parse_loss_agg_mode("x", "critic.loss_agg_mode"), Contains("critic.loss_agg_mode"));
  // Every listed name parses, and the aliases mean the same estimator.
  for (const auto& name : ppo::adv_estimator_names()) CHECK_NOTHROW(ppo::adv_estimator(name));
  for (const auto& name : ppo::loss_agg_mode_names()) CHECK_NOTHROW(ppo::parse_loss_agg_mode(name));
  for (const auto& name : ppo::policy_loss_names()) CHECK_NOTHROW(ppo::policy_loss_spec(name));
  for (const auto& name : ppo::rollout_is_level_names()) CHECK_NOTHROW(ppo::parse_rollout_is_level(name));
  CHECK(ppo::parse_kl_estimator("k3") == ppo::parse_kl_estimator("low_var_kl"));

  CHECK_THROWS_AS(ppo::make_kl_controller("pid", 0.1, 0.05, 1000), ppo::UsageError);
  CHECK_THROWS_WITH(ppo::make_kl_controller("pid", 0.1, 0.05, 1000),
                    "algorithm.kl_ctrl.type: unknown type 'pid'; valid: fixed, adaptive");
}

TEST_CASE("global_norm: the fused gradient norm equals the float64 norm of all tensors together", "[cpu][algos]") {
  torch::manual_seed(3);
  std::vector<torch::Tensor> tensors = {torch::randn({64, 32}) * 1e-3, torch::Tensor(), torch::randn({7}) * 50,
                                        torch::randn({3, 5, 2})};
  double sum = 0;
  for (const auto& t : tensors)
    if (t.defined()) sum += t.to(torch::kDouble).pow(2).sum().item<double>();
  CHECK(ppo::global_norm(tensors) == Approx(std::sqrt(sum)).epsilon(1e-6));
  CHECK(ppo::global_norm({torch::Tensor()}) == 0.0);
  tensors[3][0][0][0] = std::numeric_limits<float>::infinity();
  CHECK_FALSE(std::isfinite(ppo::global_norm(tensors)));
}
