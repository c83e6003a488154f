// Multi-turn decoding (GenerationParams::turns): appended tokens are context but masked, a trajectory does not depend
// on how it is batched or on when its continuations come, and the sampling-time log-probs are those of one forward
// over the finished trajectory.
#include <catch2/catch.hpp>

#include <cstdio>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "rollout/rollout.h"
#include "tests/model/small_model.h"

namespace {

// V = 8, peaked: EOS (2) and the stop token (5) come often, so rows take several turns.
ppo::CausalLM tiny_policy() {
  ppo::ModelConfig c = ppo_test::small_model_config(/*num_layers=*/2, /*intermediate_size=*/48, /*seed=*/11);
  c.init_std = 0.3;
  return ppo::CausalLM(c, 8);
}

constexpr int64_t kStop = 5;

// A tool that continues every turn that ended with the stop token or EOS, up to `max_turns` turns, with tokens made
// from the row and the turn (1 to 3 of them). Each answer is held back for `delay` polls (or until the decoder
// waits), so answers come while other rows decode.
class FakeTools : public ppo::TurnHandler {
 public:
  FakeTools(int max_turns, int delay) : max_turns_(max_turns), delay_(delay) {}

  bool turn_ended(const ppo::TurnEnd& end) override {
    ends.push_back(end);
    const int turn = ++turns_[end.row];
    if (end.out_of_room || turn >= max_turns_) return false;
    std::vector<int64_t> tokens;
    for (int64_t i = 0; i <= (end.row + turn) % 3; ++i) tokens.push_back(3 + (end.row + turn + i) % 5);
    held_.push_back({end.row, tokens, 0});
    return true;
  }

  std::vector<std::pair<int64_t, std::vector<int64_t>>> continuations(bool wait) override {
    std::vector<std::pair<int64_t, std::vector<int64_t>>> out;
    for (Held& h : held_) ++h.age;
    while (!held_.empty() && (held_.front().age > delay_ || (wait && out.empty()))) {
      out.emplace_back(held_.front().row, held_.front().tokens);
      given[held_.front().row].push_back(held_.front().tokens);
      if (!wait) ++given_while_decoding;
      held_.pop_front();
    }
    return out;
  }

  std::vector<ppo::TurnEnd> ends;
  std::map<int64_t, std::vector<std::vector<int64_t>>> given;  // per row, the continuations in order
  int given_while_decoding = 0;

 private:
  struct Held {
    int64_t row;
    std::vector<int64_t> tokens;
    int age;
  };
  int max_turns_, delay_;
  std::map<int64_t, int> turns_;
  std::deque<Held> held_;
};

const std::vector<std::vector<int64_t>> kPrompts = {{1, 3, 4, 5},    {1, 7}, {1, 6, 6, 6, 6, 3},   {1, 5, 4}, {1, 3},
                                                    {1, 4, 4, 7, 7}, {1},    {1, 7, 6, 5, 4, 3, 7}};

struct Layout {
  int64_t slots, check_interval, prefill;
  int delay;
};

ppo::RolloutOutput generate(ppo::CausalLM& model, FakeTools& tools, const Layout& layout) {
  std::vector<std::vector<int64_t>> prompts;
  std::vector<uint64_t> seeds;
  for (int copy = 0; copy < 2; ++copy)
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      prompts.push_back(kPrompts[i]);
      seeds.push_back(ppo::sample_seed(9, 0, static_cast<int64_t>(i), copy));
    }
  ppo::GenerationParams p;
  p.max_new_tokens = 24;
  p.temperature = 1.0;
  p.pad_id = 0;
  p.eos_id = 2;
  p.micro_batch_size = layout.slots;
  p.check_interval = layout.check_interval;
  p.prefill_micro_batch_size = layout.prefill;
  p.turns = &tools;
  p.stop_tokens = {kStop};
  return ppo::generate_responses(model, prompts, seeds, p);
}

}  // namespace

TEST_CASE("multi-turn: appended tokens are masked context, and a trajectory does not depend on its batching",
          "[cpu][rollout][multi_turn]") {
  ppo::CausalLM model = tiny_policy();
  model->eval();
  FakeTools one_wave(/*max_turns=*/4, /*delay=*/0);
  const ppo::RolloutOutput a = generate(model, one_wave, {16, 1, 0, 0});
  const int64_t B = a.responses.size(0), R = a.responses.size(1), P = a.prompts.size(1);
  const torch::Tensor attention = a.attention_mask.narrow(1, P, R);

  // The masks, derived from what the handler was told and gave: a turn ends at EOS or the stop token, a
  // continuation follows it, masked, and the trajectory ends with the last turn.
  int64_t rows_with_two_continuations = 0;
  for (int64_t b = 0; b < B; ++b) {
    INFO("row " << b);
    const std::vector<std::vector<int64_t>>& given = one_wave.given[b];
    rows_with_two_continuations += given.size() >= 2;
    std::vector<float> expected_mask;
    size_t next = 0;
    for (const ppo::TurnEnd& end : one_wave.ends) {
      if (end.row != b) continue;
      const int64_t last = end.response.back();
      CHECK((end.out_of_room || last == 2 || last == kStop));
      CHECK(end.by_stop == (last == kStop));
      expected_mask.resize(end.response.size(), 1.f);
      if (next < given.size() && static_cast<int64_t>(end.response.size() + given[next].size()) < R) {
        for (size_t i = 0; i < given[next].size(); ++i) {
          CHECK(a.responses[b][static_cast<int64_t>(end.response.size() + i)].item<int64_t>() == given[next][i]);
          expected_mask.push_back(0.f);
        }
        ++next;
      }
      for (size_t t = 0; t < end.response.size(); ++t)
        CHECK(a.responses[b][static_cast<int64_t>(t)].item<int64_t>() == end.response[t]);
    }
    const int64_t length = static_cast<int64_t>(expected_mask.size());
    expected_mask.resize(R, 0.f);
    CHECK(torch::equal(a.response_mask[b], torch::tensor(expected_mask)));
    CHECK(attention[b].sum().item<int64_t>() == length);
    CHECK(attention[b].narrow(0, 0, length).all().item<bool>());
    CHECK(torch::equal(a.log_probs[b].ne(0), a.response_mask[b].ne(0)));  // sampled tokens only
  }
  CHECK(rows_with_two_continuations >= 3);
  size_t continuations = 0;
  for (const auto& [row, given] : one_wave.given) continuations += given.size();

  // The log-probs the decoder sampled with (KV cache, rows prefilled again after each continuation) are those of one
  // forward over the finished trajectories.
  ppo::LogProbOptions no_entropy;
  no_entropy.entropy = false;
  const ppo::TokenLogProbs forward =
      ppo::compute_log_probs(model, a.input_ids, a.attention_mask, a.position_ids, R, 1.0, 0, no_entropy);
  const double diff = ((forward.log_probs - a.log_probs) * a.response_mask).abs().max().item<double>();
  std::printf(
      "multi-turn: %lld rows, %zu turns, %zu continuations (%lld rows with 2 or more); max |sampled - "
      "recomputed log-prob| %.2g\n",
      static_cast<long long>(B), one_wave.ends.size(), continuations,
      static_cast<long long>(rows_with_two_continuations), diff);
  CHECK(diff <= 1e-4);

  // Few slots, rare checks, chunked prefills and answers that come several checks later: the same trajectories.
  for (const Layout& layout : {Layout{3, 4, 2, 2}, Layout{5, 8, 0, 5}, Layout{2, 1, 1, 1}}) {
    INFO("slots " << layout.slots << ", check_interval " << layout.check_interval << ", delay " << layout.delay);
    FakeTools tools(4, layout.delay);
    const ppo::RolloutOutput b = generate(model, tools, layout);
    CHECK(torch::equal(b.responses, a.responses));
    CHECK(torch::equal(b.response_mask, a.response_mask));
    CHECK(torch::equal(b.attention_mask, a.attention_mask));
    CHECK(torch::equal(b.position_ids, a.position_ids));
    CHECK(torch::allclose(b.log_probs, a.log_probs, 0, 1e-5));
    // With waiting answers, rows went on decoding: some answers came at checks where the decoder had other work.
    if (layout.delay > 0) CHECK(tools.given_while_decoding > 0);
  }
}
