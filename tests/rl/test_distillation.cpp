// Tests of rl/distillation: the teacher's signals against a few lines of plain tensor code on the same logits (the
// log-softmax written out, the estimators' formulas, PyTorch's kl_div for the top-k losses), values and gradients; a
// teacher equal to the student gives no signal at all, exactly; the loss modes' names.
#include <catch2/catch.hpp>

#include <limits>
#include <string>

#include "common/error.h"
#include "rl/distillation.h"
#include "tests/rl/tensor_checks.h"
#include "tests/usage_error.h"

using Catch::Matchers::Contains;
using ppo_test::check_close;

namespace {

// Log-probs of `tokens` [B, R] under `logits` [B, R, V], written out: logits - log(sum(exp(logits))).
torch::Tensor plain_log_probs(const torch::Tensor& logits, const torch::Tensor& tokens) {
  const torch::Tensor max = std::get<0>(logits.max(-1, /*keepdim=*/true));
  const torch::Tensor log_z = max + (logits - max).exp().sum(-1, /*keepdim=*/true).log();
  return (logits - log_z).gather(-1, tokens.unsqueeze(-1)).squeeze(-1);
}

struct Logits {
  torch::Tensor student, teacher, tokens, mask;
};

// Student and teacher logits of 3 responses of 5 positions over a vocabulary of 11; the last row ends after 2.
Logits sample_logits() {
  torch::manual_seed(7);
  Logits l;
  l.student = torch::randn({3, 5, 11}, torch::kFloat64);
  l.teacher = torch::randn({3, 5, 11}, torch::kFloat64);
  l.tokens = torch::randint(0, 11, {3, 5}, torch::kLong);
  l.mask = torch::ones({3, 5}, torch::kFloat64);
  l.mask[2].narrow(0, 2, 3).zero_();
  return l;
}

}  // namespace

TEST_CASE("distillation: the reverse-KL reward is teacher minus student log-prob on the sampled tokens",
          "[cpu][distill]") {
  const Logits l = sample_logits();
  const torch::Tensor student = torch::log_softmax(l.student, -1).gather(-1, l.tokens.unsqueeze(-1)).squeeze(-1);
  const torch::Tensor teacher = torch::log_softmax(l.teacher, -1).gather(-1, l.tokens.unsqueeze(-1)).squeeze(-1);
  const torch::Tensor want =
      0.5 * (plain_log_probs(l.teacher, l.tokens) - plain_log_probs(l.student, l.tokens)) * l.mask;
  check_close(ppo::reverse_kl_rewards(student, teacher, l.mask, 0.5), want, 1e-12, "reward");
  // Its mean over the student's own samples estimates -KL(student || teacher): checked on one position by sampling.
  const torch::Tensor p = torch::softmax(l.student[0][0], -1), q = torch::softmax(l.teacher[0][0], -1);
  const double kl = (p * (p.log() - q.log())).sum().item<double>();
  const torch::Tensor draws = torch::multinomial(p, 200000, /*replacement=*/true);
  const double estimate = (q.log().index_select(0, draws) - p.log().index_select(0, draws)).mean().item<double>();
  CHECK(std::abs(estimate + kl) < 0.01);
}

// k3 with veRL's clamps: the log-ratio to [-20, 20], the estimate to [-10, 10].
TEST_CASE("distillation: the KL losses and their gradients equal the estimators written out", "[cpu][distill]") {
  const Logits l = sample_logits();
  for (const std::string name : {"k1", "k2", "k3", "abs"}) {
    INFO(name);
    const ppo::DistillSpec spec = ppo::distill_spec(name);
    CHECK_FALSE(spec.reward);
    torch::Tensor ours_logits = l.student.clone().requires_grad_(true);
    torch::Tensor plain_logits = l.student.clone().requires_grad_(true);
    const torch::Tensor teacher = plain_log_probs(l.teacher, l.tokens);
    const torch::Tensor ours = ppo::distill_token_losses(
        torch::log_softmax(ours_logits, -1).gather(-1, l.tokens.unsqueeze(-1)).squeeze(-1), teacher, spec, /*clamp=*/0);
    const torch::Tensor d = plain_log_probs(plain_logits, l.tokens) - teacher;  // log student - log teacher
    const torch::Tensor plain = name == "k1"   ? d
                                : name == "k2" ? 0.5 * d * d
                                : name == "k3" ? ((-d).clamp(-20, 20).exp() + d.clamp(-20, 20) - 1).clamp(-10, 10)
                                               : d.abs();
    check_close(ours, plain, 1e-12, "values");
    (ours * l.mask).sum().backward();
    (plain * l.mask).sum().backward();
    check_close(ours_logits.grad(), plain_logits.grad(), 1e-12, "gradients");
  }
  // loss_clamp caps each token's loss.
  const torch::Tensor s = torch::tensor({0.0, -3.0}, torch::kFloat64), t = torch::tensor({-3.0, 0.0}, torch::kFloat64);
  check_close(ppo::distill_token_losses(s, t, ppo::distill_spec("k1"), 1.0),
              torch::tensor({1.0, -3.0}, torch::kFloat64), 0, "clamped");
}

namespace {

// The top-k losses as PyTorch's own kl_div computes them (veRL's formulas; kl_div(input, target) is
// sum target (log target - input)) on the k + 1 outcomes: the k tokens, then the rest of the vocabulary.
torch::Tensor kl_div_losses(const std::string& name, const torch::Tensor& s_top, const torch::Tensor& t_top,
                            double beta) {
  const auto outcomes = [](const torch::Tensor& top) {
    const torch::Tensor p = top.exp();
    return torch::cat({p, 1 - p.sum(-1, true)}, -1).log();
  };
  const torch::Tensor s = outcomes(s_top), t = outcomes(t_top);
  const auto kl = [](const torch::Tensor& input, const torch::Tensor& target) {
    return torch::kl_div(input, target, at::Reduction::None, /*log_target=*/true).sum(-1);
  };
  if (name == "forward_kl_topk") return kl(s, t);
  if (name == "reverse_kl_topk") return kl(t, s);
  const torch::Tensor m = (beta * t.exp() + (1 - beta) * s.exp()).log();
  return beta * kl(m, t) + (1 - beta) * kl(m, s);
}

}  // namespace

TEST_CASE("distillation: the top-k losses and their gradients equal PyTorch's kl_div on the teacher's top tokens",
          "[cpu][distill]") {
  const Logits l = sample_logits();
  const int64_t k = 4;
  const torch::Tensor teacher_all = torch::log_softmax(l.teacher, -1);
  const auto [teacher_top, ids] = teacher_all.topk(k, -1);
  for (const std::string name : {"forward_kl_topk", "reverse_kl_topk", "jsd_topk"}) {
    for (const double beta : {0.5, 0.1, 0.9}) {
      INFO(name << " beta " << beta);
      torch::Tensor ours_logits = l.student.clone().requires_grad_(true);
      torch::Tensor plain_logits = l.student.clone().requires_grad_(true);
      const torch::Tensor ours = ppo::topk_distill_losses(torch::log_softmax(ours_logits, -1).gather(-1, ids),
                                                          teacher_top, ppo::distill_spec(name), beta, /*clamp=*/0);
      const torch::Tensor student_top = torch::log_softmax(plain_logits, -1).gather(-1, ids);
      const torch::Tensor plain = kl_div_losses(name, student_top, teacher_top, beta);
      check_close(ours, plain, 1e-12, "values");
      CHECK((ours >= 0).all().item<bool>());
      (ours * l.mask).sum().backward();
      (plain * l.mask).sum().backward();
      check_close(ours_logits.grad(), plain_logits.grad(), 1e-10, "gradients");
    }
  }
  // All k = V tokens: the forward and reverse losses are the full KLs.
  const torch::Tensor student_all = torch::log_softmax(l.student, -1);
  const auto full = [&](const std::string& name) {
    return ppo::topk_distill_losses(student_all, teacher_all, ppo::distill_spec(name), 0.5, 0);
  };
  check_close(full("forward_kl_topk"), (teacher_all.exp() * (teacher_all - student_all)).sum(-1), 1e-12, "forward");
  check_close(full("reverse_kl_topk"), (student_all.exp() * (student_all - teacher_all)).sum(-1), 1e-12, "reverse");
  // loss_clamp caps each token's loss.
  CHECK(ppo::topk_distill_losses(student_all, teacher_all, ppo::distill_spec("forward_kl_topk"), 0.5, 0.01)
            .max()
            .item<double>() == 0.01);
  // A token of probability 0 among the k adds 0, not NaN (the log 1e-8 floor).
  const torch::Tensor zero = torch::tensor({{-std::numeric_limits<double>::infinity(), 0.0}}, torch::kFloat64);
  for (const std::string name : {"forward_kl_topk", "reverse_kl_topk", "jsd_topk"})
    CHECK(torch::isfinite(ppo::topk_distill_losses(zero, zero.flip(-1), ppo::distill_spec(name), 0.5, 0))
              .all()
              .item<bool>());
}

TEST_CASE("distillation: a teacher equal to the student gives no signal, exactly", "[cpu][distill]") {
  const Logits l = sample_logits();
  const torch::Tensor same = plain_log_probs(l.student, l.tokens);
  CHECK(torch::equal(ppo::reverse_kl_rewards(same, same, l.mask, 1.0), torch::zeros_like(same)));
  for (const std::string name : {"k1", "k2", "k3", "abs"})
    CHECK(torch::equal(ppo::distill_token_losses(same, same, ppo::distill_spec(name), 0), torch::zeros_like(same)));
  const torch::Tensor top = std::get<0>(torch::log_softmax(l.student, -1).topk(4, -1));
  for (const std::string name : {"forward_kl_topk", "reverse_kl_topk", "jsd_topk"})
    for (const double beta : {0.5, 0.3}) {
      INFO(name << " beta " << beta);
      const torch::Tensor student = top.clone().requires_grad_(true);
      const torch::Tensor losses = ppo::topk_distill_losses(student, top, ppo::distill_spec(name), beta, 0);
      CHECK(torch::equal(losses, torch::zeros_like(same)));
      losses.sum().backward();  // a minimum: no gradient either
      CHECK(student.grad().abs().max().item<double>() < 1e-12);
    }
  const torch::Tensor argmax = l.student.argmax(-1);
  const ppo::DistillSums sums = ppo::distill_sums(same, same, argmax, argmax, l.mask);
  CHECK(sums.reverse_kl == 0.0);
  CHECK(sums.argmax_agree == sums.tokens);
  CHECK(sums.tokens == 12.0);
  CHECK(sums.teacher_log_prob == Approx((same * l.mask).sum().item<double>()));
}

TEST_CASE("distillation: loss modes by name, an unknown one named with the valid ones", "[cpu][distill]") {
  CHECK(ppo::distill_spec("reverse_kl_reward").reward);
  CHECK(ppo::distill_spec("low_var_kl").estimator == ppo::KlEstimator::kK3);
  CHECK_THAT(ppo_test::usage_error_message([] { ppo::distill_spec("forward_kl"); }),
             Contains("distillation.loss_mode") && Contains("'forward_kl'") && Contains("reverse_kl_reward, kl, k1"));
  CHECK(ppo::distill_spec("jsd_topk").topk == ppo::TopkDivergence::kJsd);
  CHECK_FALSE(ppo::distill_spec("k3").uses_topk());
  CHECK(ppo::distill_loss_modes().size() == 1 + ppo::kl_estimator_names().size() + 3);
}
