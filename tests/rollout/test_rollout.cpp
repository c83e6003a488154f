// Tests of rollout/: the sampler (frequencies, restricted sets), layout-independent seeded generation, greedy
// determinism, KV cache vs recompute, output layout, and sampling-time log-probs == recomputed log-probs.
#include <ATen/record_function.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "common/error.h"
#include "decode/step_graphs.h"
#include "rollout/rollout.h"
#include "tests/model/small_model.h"
#include "tests/rollout/rollout_fixtures.h"
#include "tests/scalar_reads.h"

namespace {

using ppo_test::kPrompts;
using ppo_test::params;
using ppo_test::seeds_for;
using ppo_test::tiny_policy;

// Draws n tokens from one fixed distribution (one row per draw, row i with seed sample_seed(5, 0, i, 0)) and
// returns the counts per token id.
std::vector<int64_t> draw_counts(const torch::Tensor& logits, int64_t n, double temperature, int64_t top_k,
                                 double top_p) {
  std::vector<double> u;
  for (int64_t i = 0; i < n; ++i) u.push_back(ppo::token_uniform(ppo::sample_seed(5, 0, i, 0), 0));
  auto tokens = ppo::sample_tokens(logits.unsqueeze(0).expand({n, logits.size(0)}), torch::tensor(u, torch::kDouble),
                                   temperature, top_k, top_p);
  std::vector<int64_t> counts(logits.size(0), 0);
  for (int64_t i = 0; i < n; ++i) counts[tokens[i].item<int64_t>()]++;
  return counts;
}

}  // namespace

TEST_CASE("sampler frequencies match the renormalised distribution", "[cpu][rollout]") {
  // p over ids 0..5 (deliberately not sorted): sorted order is ids 1 (.30), 3 (.25), 5 (.20), 4 (.15), 2 (.07), 0
  // (.03).
  const std::vector<double> p = {0.03, 0.30, 0.07, 0.25, 0.15, 0.20};
  auto logits = torch::log(torch::tensor(p, torch::kDouble)).to(torch::kFloat);
  struct Case {
    double temperature;
    int64_t top_k;
    double top_p;
    std::vector<double> expected;  // derived by hand below
  };
  const std::vector<Case> cases = {
      // No restriction: p itself.
      {1.0, -1, 1.0, p},
      // top_k = 3 keeps ids 1, 3, 5 with mass .75: .4, 1/3, 4/15.
      {1.0, 3, 1.0, {0, 0.30 / 0.75, 0, 0.25 / 0.75, 0, 0.20 / 0.75}},
      // top_p = 0.5: mass before ids 1, 3, 5 is 0, .30, .55 -> keep 1 and 3 (.30 + .25 = .55 >= .5).
      {1.0, -1, 0.5, {0, 0.30 / 0.55, 0, 0.25 / 0.55, 0, 0}},
      // top_k = 4 (mass .9, renormalised .333 .278 .222 .167), then top_p = 0.8: mass before is 0, .333, .611,
      // .833 -> the 4th is dropped, leaving ids 1, 3, 5 = .4, 1/3, 4/15.
      {1.0, 4, 0.8, {0, 0.30 / 0.75, 0, 0.25 / 0.75, 0, 0.20 / 0.75}},
      // temperature 2: p^(1/2) renormalised (sum of square roots = 2.3466...).
      {2.0, -1, 1.0, {}},
  };
  for (const auto& cs : cases) {
    std::vector<double> expected = cs.expected;
    if (expected.empty()) {
      double z = 0;
      for (double x : p) z += std::sqrt(x);
      for (double x : p) expected.push_back(std::sqrt(x) / z);
    }
    // The distribution itself.
    auto probs = ppo::sampling_probs(logits.unsqueeze(0), cs.temperature, cs.top_k, cs.top_p)[0];
    for (int64_t v = 0; v < 6; ++v) CHECK(std::abs(probs[v].item<double>() - expected[v]) < 1e-6);
    // Frequencies: chi-square over the allowed ids against the 99.9% quantile for df = allowed - 1.
    const int64_t n = 20000;
    auto counts = draw_counts(logits, n, cs.temperature, cs.top_k, cs.top_p);
    double chi2 = 0;
    int64_t allowed = 0;
    for (int64_t v = 0; v < 6; ++v) {
      if (expected[v] == 0) {
        CHECK(counts[v] == 0);  // never outside the allowed set
        continue;
      }
      ++allowed;
      const double e = n * expected[v];
      chi2 += (counts[v] - e) * (counts[v] - e) / e;
    }
    const std::map<int64_t, double> chi2_999 = {{2, 10.83}, {3, 13.82}, {4, 16.27}, {5, 18.47}, {6, 20.52}};
    WARN("T=" << cs.temperature << " top_k=" << cs.top_k << " top_p=" << cs.top_p << ": chi2 = " << chi2 << " (df "
              << allowed - 1 << ", 99.9% quantile " << chi2_999.at(allowed) << ")");
    CHECK(chi2 < chi2_999.at(allowed));
  }
}

TEST_CASE("top-k and top-p never sample outside the allowed set", "[cpu][rollout]") {
  torch::manual_seed(0);
  const int64_t n = 400, V = 50;
  auto logits = torch::randn({n, V}) * 3;
  auto u = torch::rand({n}, torch::kDouble);
  auto top5 = std::get<0>(logits.topk(5, -1));  // [n, 5]
  auto tokens = ppo::sample_tokens(logits, u, 1.0, /*top_k=*/5, /*top_p=*/1.0);
  auto chosen = logits.gather(1, tokens.unsqueeze(1)).squeeze(1);
  CHECK(chosen.ge(top5.select(1, 4)).all().item<bool>());

  // Nucleus 0.6: the mass of the strictly more likely tokens than the sampled one is < 0.6.
  tokens = ppo::sample_tokens(logits, u, 1.0, /*top_k=*/-1, /*top_p=*/0.6);
  auto probs = torch::softmax(logits.to(torch::kDouble), -1);
  auto chosen_p = probs.gather(1, tokens.unsqueeze(1));   // [n, 1]
  auto mass_above = (probs * probs.gt(chosen_p)).sum(1);  // [n]
  CHECK(mass_above.lt(0.6).all().item<bool>());
  // ... and the restriction binds: some rows would have sampled outside it without top_p.
  auto free_tokens = ppo::sample_tokens(logits, u, 1.0, -1, 1.0);
  auto free_p = probs.gather(1, free_tokens.unsqueeze(1));
  CHECK((probs * probs.gt(free_p)).sum(1).ge(0.6).any().item<bool>());
  // Greedy ignores the uniforms.
  CHECK(torch::equal(ppo::sample_tokens(logits, u, 0.0, -1, 1.0), logits.argmax(-1)));
}

TEST_CASE("seed hashing gives distinct, uniform values", "[cpu][rollout]") {
  std::set<uint64_t> seeds;
  double sum = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    seeds.insert(ppo::sample_seed(1, 0, i, 0));
    seeds.insert(ppo::sample_seed(1, 0, 0, i + 1));
    seeds.insert(ppo::sample_seed(1, i + 1, 0, 0));
    const double u = ppo::token_uniform(42, i);
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    sum += u;
  }
  CHECK(seeds.size() == 3000);
  CHECK(ppo::sample_seed(1, 2, 3, 4) == ppo::sample_seed(1, 2, 3, 4));
  CHECK(std::abs(sum / 1000 - 0.5) < 0.03);  // mean of 1000 U(0,1): sd 0.0091, so 0.03 is > 3 sd
}

TEST_CASE("log_probs_from_logits and entropy on a hand-computed distribution", "[cpu][rollout]") {
  // logits [0, 0, ln 2] -> p = [1/4, 1/4, 1/2]; log p[2] = -ln 2; log p[0] = -ln 4;
  // H = 2 * (1/4) ln 4 + (1/2) ln 2 = 1.5 ln 2 = 1.0397208.
  auto logits = torch::tensor({0.0, 0.0, std::log(2.0)}).view({1, 1, 3}).repeat({1, 2, 1});
  auto labels = torch::tensor({2, 0}, torch::kLong).view({1, 2});
  auto lp = ppo::log_probs_from_logits(logits, labels);
  CHECK(lp[0][0].item<double>() == Approx(-std::log(2.0)).margin(1e-6));
  CHECK(lp[0][1].item<double>() == Approx(-std::log(4.0)).margin(1e-6));
  CHECK(ppo::entropy_from_logits(logits)[0][0].item<double>() == Approx(1.5 * std::log(2.0)).margin(1e-6));
}

TEST_CASE("rollout output layout: left-padded prompts, right-padded responses, masks", "[cpu][rollout]") {
  auto model = tiny_policy();
  auto p = params(1.0);
  auto out = ppo::generate_responses(model, kPrompts, seeds_for(kPrompts.size(), 1), p);
  const int64_t B = kPrompts.size(), P = 7, R = p.max_new_tokens;
  REQUIRE(out.prompts.sizes() == torch::IntArrayRef({B, P}));
  REQUIRE(out.responses.sizes() == torch::IntArrayRef({B, R}));
  REQUIRE(out.input_ids.sizes() == torch::IntArrayRef({B, P + R}));
  CHECK(torch::equal(out.input_ids, torch::cat({out.prompts, out.responses}, 1)));
  int64_t stopped = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = kPrompts[b].size();
    for (int64_t j = 0; j < P; ++j) {
      const bool real = j >= P - len;
      CHECK(out.prompts[b][j].item<int64_t>() == (real ? kPrompts[b][j - (P - len)] : 0));
      CHECK(out.attention_mask[b][j].item<int64_t>() == (real ? 1 : 0));
    }
    bool after_eos = false;
    for (int64_t t = 0; t < R; ++t) {
      const int64_t token = out.responses[b][t].item<int64_t>();
      CHECK(out.response_mask[b][t].item<float>() == (after_eos ? 0.0f : 1.0f));
      CHECK(out.attention_mask[b][P + t].item<int64_t>() == (after_eos ? 0 : 1));
      if (after_eos) CHECK(token == p.pad_id);
      if (!after_eos) CHECK(out.log_probs[b][t].item<float>() < 0.0f);
      if (token == p.eos_id && !after_eos) {
        after_eos = true;
        ++stopped;
      }
    }
  }
  CHECK(stopped >= 2);  // EOS stopping is exercised (V = 8 makes EOS frequent)
  CHECK(stopped < B);   // and so is running to the full width
  CHECK(torch::equal(out.position_ids, (out.attention_mask.cumsum(1) - 1).clamp_min(0)));
}

static void check_greedy_and_cache(const torch::Device& device) {
  auto model = tiny_policy(device);
  auto p = params(0.0);
  auto a = ppo::generate_responses(model, kPrompts, seeds_for(kPrompts.size(), 1), p);
  auto b =
      ppo::generate_responses(model, kPrompts, seeds_for(kPrompts.size(), 2), p);  // seeds do not matter when greedy
  CHECK(torch::equal(a.responses, b.responses));
  p.use_cache = false;
  auto c = ppo::generate_responses(model, kPrompts, seeds_for(kPrompts.size(), 1), p);
  CHECK(torch::equal(a.responses, c.responses));
  const double diff = (a.log_probs - c.log_probs).abs().max().item<double>();
  WARN("greedy, KV cache vs recompute, max |log-prob diff|: " << diff);
  CHECK(diff <= 1e-5);
}

TEST_CASE("greedy generation is deterministic and the KV cache matches recomputation", "[cpu][rollout]") {
  check_greedy_and_cache(torch::kCPU);
}

static void check_batch_independence(const torch::Device& device) {
  auto model = tiny_policy(device);
  auto p = params(1.0);
  p.top_k = 6;
  p.top_p = 0.95;
  auto seeds = seeds_for(kPrompts.size(), 7);
  auto batch = ppo::generate_responses(model, kPrompts, seeds, p);  // micro-batches of 3, prompt width 7
  double max_diff = 0;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    auto alone = ppo::generate_responses(model, {kPrompts[i]}, {seeds[i]}, p);  // no padding, batch of 1
    INFO("row " << i);
    CHECK(torch::equal(alone.responses[0], batch.responses[i]));
    max_diff = std::max(max_diff, (alone.log_probs[0] - batch.log_probs[i]).abs().max().item<double>());
  }
  WARN("alone vs in a batch, max |log-prob diff|: " << max_diff);
  CHECK(max_diff <= 1e-5);
  // Different seeds give different samples (the test above could not pass by sampling greedily).
  auto other = ppo::generate_responses(model, kPrompts, seeds_for(kPrompts.size(), 8), p);
  CHECK_FALSE(torch::equal(other.responses, batch.responses));
}

TEST_CASE("a sampled response does not depend on the batch it is generated in", "[cpu][rollout]") {
  check_batch_independence(torch::kCPU);
}

static void check_sampling_log_probs(const torch::Device& device) {
  auto model = tiny_policy(device);
  auto p = params(0.7);
  p.top_p = 0.9;  // restricts sampling only; log-probs stay those of the full softmax(logits / T)
  auto out = ppo::generate_responses(model, kPrompts, seeds_for(kPrompts.size(), 3), p);
  torch::NoGradGuard no_grad;
  auto recomputed = ppo::compute_log_probs(model, out.input_ids, out.attention_mask, out.position_ids, p.max_new_tokens,
                                           p.temperature, /*micro_batch_size=*/3);
  REQUIRE(recomputed.log_probs.sizes() == out.log_probs.sizes());
  const double diff = ((recomputed.log_probs - out.log_probs).abs() * out.response_mask).max().item<double>();
  WARN("sampling-time vs recomputed log-probs, max diff: " << diff);
  CHECK(diff <= 1e-5);
  // Entropy of an 8-way distribution lies in (0, ln 8].
  auto entropy = recomputed.entropy.masked_select(out.response_mask.gt(0));
  CHECK(entropy.gt(0).all().item<bool>());
  CHECK(entropy.le(std::log(8.0) + 1e-5).all().item<bool>());
}

TEST_CASE("sampling-time log-probs equal compute_log_probs", "[cpu][rollout]") {
  check_sampling_log_probs(torch::kCPU);
}

TEST_CASE("compute_log_probs is differentiable", "[cpu][rollout]") {
  auto model = tiny_policy();
  auto out = ppo::generate_responses(model, kPrompts, seeds_for(kPrompts.size(), 3), params(1.0));
  auto result = ppo::compute_log_probs(model, out.input_ids, out.attention_mask, out.position_ids, 12, 1.0, 4);
  (result.log_probs * out.response_mask).sum().backward();
  CHECK(model->model->embed_tokens->weight.grad().abs().sum().item<double>() > 0);
}

TEST_CASE("generate rejects bad parameters", "[cpu][rollout]") {
  auto model = tiny_policy();
  auto p = params(1.0);
  auto seeds = seeds_for(kPrompts.size(), 1);
  p.top_p = 0.0;
  CHECK_THROWS_WITH(ppo::generate_responses(model, kPrompts, seeds, p), Catch::Contains("rollout.top_p"));
  p = params(1.0);
  p.prompt_width = 3;  // the longest prompt has 7 tokens
  CHECK_THROWS_AS(ppo::generate_responses(model, kPrompts, seeds, p), ppo::UsageError);
  p = params(1.0);
  p.max_new_tokens = 300;  // beyond model.max_position_embeddings = 256
  CHECK_THROWS_WITH(ppo::generate_responses(model, kPrompts, seeds, p),
                    Catch::Contains("model.max_position_embeddings"));
  CHECK_THROWS_AS(ppo::generate_responses(model, kPrompts, {1, 2}, params(1.0)), ppo::UsageError);
}

static void check_host_reads(const torch::Device& device) {
  auto model = tiny_policy(device);
  auto p = params(1.0);
  p.eos_id = -1;  // every row runs R = 20 tokens: one prefill and 19 decode steps
  p.max_new_tokens = 20;
  p.micro_batch_size = static_cast<int64_t>(kPrompts.size());
  // The counter sees operators: check that it would see an item().
  {
    ppo_test::ScalarReadCounter counter;
    (void)torch::ones({2}).sum().item<double>();
    REQUIRE(counter.count() >= 1);
  }
  for (int64_t interval : {1, 4, 8}) {
    p.check_interval = interval;
    ppo_test::ScalarReadCounter counter;
    const int64_t before = ppo::rollout_host_reads();
    ppo::generate_responses(model, kPrompts, seeds_for(kPrompts.size(), 3), p);
    INFO("check_interval " << interval);
    CHECK(counter.count() == 0);
    // Checks after steps k, 2k, ... and after step 19, when every row has its last token.
    CHECK(ppo::rollout_host_reads() - before == (19 + interval - 1) / interval);
  }
}

TEST_CASE("decoding reads from the device only once every check_interval steps", "[cpu][rollout]") {
  check_host_reads(torch::kCPU);
}

static void check_continuous_batching(const torch::Device& device) {
  auto model = tiny_policy(device);  // V = 8, EOS = 2: rows end at very different lengths
  std::vector<std::vector<int64_t>> prompts;
  for (int i = 0; i < 5; ++i) prompts.insert(prompts.end(), kPrompts.begin(), kPrompts.end());  // 40 rows
  const auto seeds = seeds_for(prompts.size(), 21);
  auto p = params(1.0);
  p.max_new_tokens = 24;
  p.micro_batch_size = 40;  // everything in one wave
  auto one_wave = ppo::generate_responses(model, prompts, seeds, p);
  const auto lengths = one_wave.response_mask.sum(1);
  REQUIRE(lengths.min().item<double>() <= 3);  // the workload is length-skewed
  REQUIRE(lengths.max().item<double>() >= 12);
  // The same tokens as the plain loop that runs the whole sequence again at every step (no cache, no slots).
  p.use_cache = false;
  auto plain = ppo::generate_responses(model, prompts, seeds, p);
  p.use_cache = true;
  CHECK(torch::equal(plain.responses, one_wave.responses));
  CHECK((plain.log_probs - one_wave.log_probs).abs().max().item<double>() <= 1e-5);
  // Prefill in chunks of 3 prompts too: with 40 slots, the first wave fills the cache in 14 forwards. With
  // bucket_slots, steps run on bucket sizes of slots once half are idle (what CUDA graphs do), padded with idle slots.
  for (int64_t slots : {1, 4, 7, 40}) {
    for (int64_t interval : {1, 3, 8}) {
      for (int64_t prefill : {0, 3}) {
        p.micro_batch_size = slots;
        p.check_interval = interval;
        p.prefill_micro_batch_size = prefill;
        p.bucket_slots = prefill > 0;
        int64_t finished = 0;
        p.on_progress = [&finished](int64_t rows, int64_t /*decode_steps*/) { finished += rows; };
        ppo_test::ScalarReadCounter counter;
        auto out = ppo::generate_responses(model, prompts, seeds, p);
        INFO(slots << " slots, check_interval " << interval << ", prefill chunks of " << prefill << ", bucket_slots "
                   << p.bucket_slots);
        CHECK(counter.count() == 0);
        CHECK(finished == static_cast<int64_t>(prompts.size()));  // every row reported finished once
        CHECK(torch::equal(out.responses, one_wave.responses));
        CHECK(torch::equal(out.attention_mask, one_wave.attention_mask));
        CHECK((out.log_probs - one_wave.log_probs).abs().max().item<double>() <= 1e-5);
      }
    }
  }
}

TEST_CASE("continuous batching: rows that finish hand their slot to waiting prompts, results unchanged",
          "[cpu][rollout]") {
  check_continuous_batching(torch::kCPU);
}

TEST_CASE("decode buckets: 1, 2, 4, 8, then multiples of 16, at most the slots", "[cpu][rollout]") {
  const std::vector<std::pair<int64_t, int64_t>> expected = {{1, 1},  {2, 2},   {3, 4},   {5, 8},   {8, 8},
                                                             {9, 16}, {16, 16}, {17, 32}, {33, 48}, {64, 64}};
  for (const auto& [rows, bucket] : expected) {
    INFO(rows << " rows");
    CHECK(ppo::decode_bucket(rows, 256) == bucket);
  }
  CHECK(ppo::decode_bucket(33, 40) == 40);  // capped at the slots allocated
  CHECK(ppo::decode_bucket(3, 3) == 3);
}

// The decode step's ops by name, nested ones included (RecordFunction, inside rollout's scope), and the addresses of
// the tensors each step's ops take (wrapped numbers, which are scalars, aside).
std::map<std::string, int64_t> g_step_ops;
std::vector<std::map<const void*, std::string>> g_step_tensors;  // per step: address -> the first op taking it
thread_local int g_step_depth = -1;
thread_local std::string g_top_op;  // the top-level op being run inside a step
int64_t g_top_level_ops = 0;

void record_step_op(const at::RecordFunction& fn) {
  ++g_step_ops[fn.name()];
  if (g_step_depth == 0) g_top_op = fn.name(), ++g_top_level_ops;
  for (const c10::IValue& input : fn.inputs()) {
    if (!input.isTensor()) continue;
    const at::Tensor& t = input.toTensor();
    if (t.defined() && !t.unsafeGetTensorImpl()->is_wrapped_number())
      g_step_tensors.back().emplace(t.data_ptr(), g_step_depth == 0 ? g_top_op : g_top_op + " > " + fn.name());
  }
}

// Runs `f` with the counting callback on; returns the steps it saw.
template <class F>
int64_t watch_steps(F&& f) {
  g_step_ops.clear();
  g_step_tensors.clear();
  g_top_level_ops = 0;
  const auto handle = at::addGlobalCallback(
      at::RecordFunctionCallback(
          [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
            const bool scope = fn.scope() == at::RecordScope::USER_SCOPE;
            if (scope && std::strcmp(fn.name(), "ppo::decode_step") == 0) {
              g_step_depth = 0;
              g_step_tensors.emplace_back();
            } else if (!scope && g_step_depth >= 0) {
              record_step_op(fn);
              ++g_step_depth;
            }
            return nullptr;
          },
          [](const at::RecordFunction& fn, at::ObserverContext*) {
            if (fn.scope() == at::RecordScope::USER_SCOPE && std::strcmp(fn.name(), "ppo::decode_step") == 0)
              g_step_depth = -1;
            else if (g_step_depth > 0)
              --g_step_depth;
          })
          .needsInputs(true)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
  f();
  at::removeCallback(handle);
  return static_cast<int64_t>(g_step_tensors.size());
}

int64_t op_count(const char* name) {
  const auto found = g_step_ops.find(name);
  return found == g_step_ops.end() ? int64_t{0} : found->second;
}

TEST_CASE("a float32 decode step on the CPU runs no cast, roll or cat, and few ops", "[cpu][rollout]") {
  for (const std::string family : {"", "qwen3", "mistral"}) {
    INFO("family " << family);
    auto model = tiny_policy(torch::kCPU, family);
    auto p = params(1.0);
    p.eos_id = -1;  // every row runs to the end
    const int64_t steps =
        watch_steps([&] { ppo::generate_responses(model, kPrompts, seeds_for(kPrompts.size(), 4), p); });
    // 8 prompts in slots of 3: waves of 3, 3 and 2 rows, 11 steps each after the prefill's token.
    REQUIRE(steps == 3 * (p.max_new_tokens - 1));
    for (const char* name : {"aten::to", "aten::_to_copy", "aten::roll", "aten::cat", "aten::empty", "aten::clone"}) {
      INFO(name);
      CHECK(op_count(name) == 0);
    }
    int64_t total = 0;
    std::string by_name;
    for (const auto& [name, count] : g_step_ops) total += count, by_name += name + " " + std::to_string(count) + ", ";
    WARN(family << " ATen ops per decode step: " << double(g_top_level_ops) / steps << " called, "
                << double(total) / steps << " with the ones they call; over " << steps << " steps: " << by_name);
    // Per step: the mask's new position, the embedding's and the uniforms' gathers, 2 per layer (2 layers: silu and
    // its product with up; the projections are packed loops), and 10 of bookkeeping; inside them mostly as_strided.
    // Qwen3's q/k norms run in the kernels; Mistral's window adds 4 (the position it hides: copy, add, remainder,
    // and the mask's fill).
    const int64_t window_ops = family == "mistral" ? 4 : 0;
    CHECK(g_top_level_ops == (17 + window_ops) * steps);
    CHECK(total <= (40 + 2 * window_ops) * steps);
  }
}

// What a CUDA graph replay needs: a step reads and writes the tensors of the step before, at the same addresses.
static void check_fixed_addresses(ppo::CausalLM model, const std::string& family) {
  INFO("family " << family);
  auto p = params(1.0);
  p.eos_id = -1;  // every row runs to the end: every step has all 8 slots
  p.micro_batch_size = static_cast<int64_t>(kPrompts.size());
  struct EveryTurnEnds : ppo::TurnHandler {
    bool turn_ended(const ppo::TurnEnd&) override { return false; }
    std::vector<std::pair<int64_t, std::vector<int64_t>>> continuations(bool) override { return {}; }
  } turns;
  for (bool multi_turn : {false, true}) {
    // Multi-turn's stop-sequence bookkeeping too, with a sequence the V = 8 model never samples (ids 9).
    p.turns = multi_turn ? &turns : nullptr;
    p.stop_tokens.assign(multi_turn ? 2 : 0, 9);
    INFO("multi-turn " << multi_turn);
    const int64_t steps =
        watch_steps([&] { ppo::generate_responses(model, kPrompts, seeds_for(kPrompts.size(), 4), p); });
    REQUIRE(steps == p.max_new_tokens - 1);
    REQUIRE(g_step_tensors[0].size() >= 20);
    for (int64_t s = 1; s < steps; ++s) {
      std::string moved;  // the ops whose tensors are not the first step's
      for (const auto& [address, op] : g_step_tensors[s])
        if (g_step_tensors[0].count(address) == 0) moved += op + " ";
      INFO("step " << s << ": tensors at new addresses taken by " << moved);
      CHECK(g_step_tensors[s].size() == g_step_tensors[0].size());
      CHECK(moved.empty());
    }
  }
}

TEST_CASE("a decode step reads and writes the same tensors at the same addresses every step", "[cpu][rollout]") {
  for (const std::string family : {"", "qwen3", "mistral"})
    check_fixed_addresses(tiny_policy(torch::kCPU, family), family);
}

// The decode step's ATen path is what a GPU runs: on the CPU it must give the kernels' tokens, with continuous
// batching, prefill chunks and bucket padding; and both equal recomputing every token with the full forward. Also for
// Qwen3's q/k norms (normalised in the step's kernels), Mistral's sliding window (4 tokens, hidden from the static
// mask one position per step) and the MoE layers of Qwen3-MoE and Mixtral.
TEST_CASE("the decode step's ATen path and its CPU kernels sample the same tokens, as recomputation does",
          "[cpu][rollout]") {
  for (const std::string family : {"", "qwen3", "mistral", "qwen3_moe", "mixtral"}) {
    INFO("family " << family);
    auto model = tiny_policy(torch::kCPU, family);
    std::vector<std::vector<int64_t>> prompts;
    for (int i = 0; i < 3; ++i) prompts.insert(prompts.end(), kPrompts.begin(), kPrompts.end());
    auto p = params(1.0);
    p.max_new_tokens = 16;
    p.micro_batch_size = 7;
    p.prefill_micro_batch_size = 3;
    p.bucket_slots = true;
    p.check_interval = 3;
    const auto seeds = seeds_for(prompts.size(), 31);
    const auto kernels = ppo::generate_responses(model, prompts, seeds, p);
    p.cpu_kernels = false;
    const int64_t steps = watch_steps([&] { ppo::generate_responses(model, prompts, seeds, p); });
    const auto ops = ppo::generate_responses(model, prompts, seeds, p);
    p.cpu_kernels = true;
    p.use_cache = false;
    const auto recomputed = ppo::generate_responses(model, prompts, seeds, p);
    REQUIRE(steps > 0);
    CHECK(op_count("aten::flip") > 0);  // the ATen path ran (rotary's flip)
    CHECK(torch::equal(kernels.responses, ops.responses));
    CHECK(torch::equal(kernels.responses, recomputed.responses));
    const double diff = (kernels.log_probs - ops.log_probs).abs().max().item<double>();
    const double recomputed_diff = (kernels.log_probs - recomputed.log_probs).abs().max().item<double>();
    WARN(family << " decode step, max |log-prob diff|: CPU kernels vs ATen ops " << diff << ", vs recomputation "
                << recomputed_diff);
    // The ATen path attends as a GPU does (eager or sdpa over the whole cache width), the kernel over the cached
    // keys: float32 sums in other orders, up to 1.1e-5 apart after Mixtral's eight layers.
    CHECK(diff <= 2e-5);
    CHECK(recomputed_diff <= 1e-5);
    CHECK(kernels.response_mask.sum(1).max().item<double>() > 8);  // rows run past Mistral's window
  }
}

TEST_CASE("the CPU sampler's loop agrees with the ATen sampler", "[cpu][rollout]") {
  torch::manual_seed(3);
  const auto logits = torch::randn({64, 1000}) * 3;  // float32: the loop; its float64 copy takes the ATen path
  std::vector<double> u;
  for (int64_t i = 0; i < 64; ++i) u.push_back(ppo::token_uniform(ppo::sample_seed(9, 0, i, 0), 0));
  const auto uniforms = torch::tensor(u, torch::kDouble);
  for (double temperature : {0.0, 0.7, 1.0}) {
    INFO("temperature " << temperature);
    const ppo::Sampled loop = ppo::sample(logits, uniforms, temperature, -1, 1.0);
    const ppo::Sampled ops = ppo::sample(logits.to(torch::kDouble), uniforms, temperature, -1, 1.0);
    CHECK(torch::equal(loop.tokens, ops.tokens));
    const double diff = (loop.log_probs - ops.log_probs).abs().max().item<double>();
    WARN("loop vs ATen sampler, max |log-prob diff|: " << diff);
    CHECK(diff <= 1e-6);
  }
}

// The same checks on the GPU: the decode loop's state lives on the device, and its only host reads are the counted
// ones (ctest -L gpu; skipped without a CUDA device).
TEST_CASE("rollout on CUDA: greedy and cached decoding, batch independence, log-probs, host reads, continuous batching",
          "[gpu][rollout]") {
  const torch::Device cuda(torch::kCUDA, 0);
  // The same seeds sample the same responses on both devices (uniforms come from the seeds, not a device generator).
  auto p = params(1.0);
  const auto seeds = seeds_for(kPrompts.size(), 5);
  auto cpu_model = tiny_policy(), cuda_model = tiny_policy(cuda);
  auto on_cpu = ppo::generate_responses(cpu_model, kPrompts, seeds, p);
  auto on_cuda = ppo::generate_responses(cuda_model, kPrompts, seeds, p);
  REQUIRE(on_cuda.responses.is_cuda());
  CHECK(torch::equal(on_cuda.responses.cpu(), on_cpu.responses));
  const double diff = (on_cuda.log_probs.cpu() - on_cpu.log_probs).abs().max().item<double>();
  WARN("CUDA vs CPU sampling-time log-probs, max diff: " << diff);
  CHECK(diff <= 1e-5);
  check_greedy_and_cache(cuda);
  check_batch_independence(cuda);
  check_sampling_log_probs(cuda);
  check_host_reads(cuda);
  check_continuous_batching(cuda);
  // CUDA graphs against eager steps: the same kernels, so the same bits, bucket padding included (40 slots drain to
  // 32, 16, 8, ... as rows finish).
  std::vector<std::vector<int64_t>> prompts;
  for (int i = 0; i < 5; ++i) prompts.insert(prompts.end(), kPrompts.begin(), kPrompts.end());
  auto q = params(1.0);
  q.max_new_tokens = 24;
  q.micro_batch_size = 40;
  q.cuda_graphs = false;
  const auto eager = ppo::generate_responses(cuda_model, prompts, seeds_for(prompts.size(), 21), q);
  q.cuda_graphs = true;
  const int64_t replays = ppo::rollout_graph_replays(), captures = ppo::rollout_graph_captures();
  const auto graphed = ppo::generate_responses(cuda_model, prompts, seeds_for(prompts.size(), 21), q);
  WARN("graphs: " << ppo::rollout_graph_captures() - captures << " captured, " << ppo::rollout_graph_replays() - replays
                  << " steps replayed");
  CHECK(ppo::rollout_graph_captures() - captures >= 2);
  CHECK(ppo::rollout_graph_replays() - replays >= 10);
  CHECK(torch::equal(graphed.responses, eager.responses));
  CHECK(torch::equal(graphed.log_probs, eager.log_probs));
}
