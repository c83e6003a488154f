// Packed sequences (model/packing.h) compute what the padded tensors compute: log-probs, entropies, values and every
// parameter's gradient, with either attention kernel and with gradient checkpointing; attention never crosses from
// one sequence into another; the same checks on CUDA (a [gpu] case).
#include <catch2/catch.hpp>

#include <numeric>

#include "model/packing.h"
#include "model/transformer.h"
#include "rollout/rollout.h"
#include "tests/model/small_model.h"

namespace {

constexpr int64_t kVocab = 40;

// Rows of a padded micro-batch: left-padded prompts of `prompt` tokens and right-padded responses of `response`
// tokens, P and R columns (row 4 has an empty response, as a padding copy may).
struct Ragged {
  torch::Tensor ids, mask, positions;  // [B, P + R]
  int64_t R = 0;
};

Ragged ragged_batch(int64_t seed, std::vector<int64_t> prompt = {7, 3, 5, 1, 6, 2},
                    std::vector<int64_t> response = {6, 2, 4, 1, 0, 5}) {
  const int64_t B = static_cast<int64_t>(prompt.size()), P = 7, R = 6;
  torch::manual_seed(seed);
  Ragged r;
  r.R = R;
  r.ids = torch::randint(kVocab, {B, P + R}, torch::kInt64);
  r.mask = torch::zeros({B, P + R}, torch::kInt64);
  for (int64_t b = 0; b < B; ++b) r.mask[b].narrow(0, P - prompt[b], prompt[b] + response[b]).fill_(1);
  r.ids.mul_(r.mask);  // padding holds token 0, as the rollout writes it
  r.positions = ppo::position_ids_from_mask(r.mask);
  return r;
}

ppo::ModelConfig model_config(const std::string& attention, bool checkpointing, const std::string& family = "") {
  ppo::ModelConfig c = ppo_test::with_family(
      ppo_test::small_model_config(/*num_layers=*/3, /*intermediate_size=*/64, /*seed=*/9), family);
  c.attn_implementation = attention;
  c.enable_gradient_checkpointing = checkpointing;
  return c;
}

std::vector<std::string> attention_kernels() {
  std::vector<std::string> kernels = {"eager"};
  if (ppo::sdpa_available()) kernels.push_back("sdpa");
  return kernels;
}

// max |a - b| over the real response tokens; and packed results are exactly 0 on padding.
double masked_diff(const torch::Tensor& packed, const torch::Tensor& padded, const torch::Tensor& response_mask) {
  CHECK((packed * (1 - response_mask)).abs().max().item<double>() == 0.0);
  return ((packed - padded).abs() * response_mask).max().item<double>();
}

std::vector<torch::Tensor> take_gradients(torch::nn::Module& model) {
  std::vector<torch::Tensor> grads;
  for (auto& p : model.parameters()) {
    grads.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
    p.mutable_grad() = torch::Tensor();
  }
  return grads;
}

// The largest gradient difference relative to that parameter's largest gradient.
double relative_gradient_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double scale = std::max(a[i].abs().max().item<double>(), 1e-6);
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>() / scale);
  }
  return worst;
}

// Packed log-probs, entropies (temperature 0.7) and critic values against the padded forward of `r`, on `device`
// with attention `kernel`, each within 1e-5 at the real response tokens; returns the largest difference.
double check_packed_outputs(const Ragged& r, const std::string& kernel, torch::Device device,
                            const std::string& family = "") {
  INFO("attention " << kernel << " on " << device << ", family " << family);
  const ppo::PackedSequences packed = ppo::pack_sequences(r.ids, r.mask, r.positions, r.R).to(device);
  const torch::Tensor ids = r.ids.to(device), mask = r.mask.to(device), positions = r.positions.to(device);
  const torch::Tensor response_mask = r.mask.narrow(1, r.ids.size(1) - r.R, r.R).to(device, torch::kFloat);
  torch::NoGradGuard no_grad;
  ppo::CausalLM policy(model_config(kernel, false, family), kVocab);
  policy->to(device);
  policy->eval();
  const ppo::TokenLogProbs padded = ppo::compute_log_probs(policy, ids, mask, positions, r.R, /*temperature=*/0.7);
  const ppo::TokenLogProbs ours = ppo::compute_log_probs_packed(policy, packed, /*temperature=*/0.7);
  REQUIRE(ours.log_probs.device() == device);
  const double lp = masked_diff(ours.log_probs, padded.log_probs, response_mask);
  const double entropy = masked_diff(ours.entropy, padded.entropy, response_mask);
  INFO("max |packed - padded|: log-probs " << lp << ", entropy " << entropy);
  CHECK(lp <= 1e-5);
  CHECK(entropy <= 1e-5);

  ppo::ValueModel critic(model_config(kernel, false, family), kVocab);
  critic->to(device);
  critic->eval();
  const int64_t T = r.ids.size(1);
  const torch::Tensor values_padded = critic->forward(ids, positions, mask).slice(1, T - r.R - 1, T - 1);
  const torch::Tensor hidden = critic->model->forward_packed(packed.input_ids, packed.position_ids, packed.lengths);
  const torch::Tensor values_packed =
      ppo::unpack_responses(packed, critic->values_from_hidden(hidden[0].index_select(0, packed.predictors)));
  const double values = masked_diff(values_packed, values_padded, response_mask);
  INFO("values " << values);
  CHECK(values <= 1e-5);
  return std::max({lp, entropy, values});
}

// Every parameter's gradient of the policy's and the critic's losses, packed against padded, on `device` with
// attention `kernel`, with or without gradient checkpointing, each within 1e-4 of that parameter's largest gradient;
// returns the largest relative difference.
double check_packed_gradients(const Ragged& r, const std::string& kernel, bool checkpointing, torch::Device device,
                              const std::string& family = "") {
  INFO("attention " << kernel << " on " << device << ", gradient checkpointing " << checkpointing << ", family "
                    << family);
  const ppo::PackedSequences packed = ppo::pack_sequences(r.ids, r.mask, r.positions, r.R).to(device);
  const torch::Tensor ids = r.ids.to(device), mask = r.mask.to(device), positions = r.positions.to(device);
  const torch::Tensor response_mask = r.mask.narrow(1, r.ids.size(1) - r.R, r.R).to(torch::kFloat);
  torch::manual_seed(4);
  const torch::Tensor weights = (torch::randn(response_mask.sizes()) * response_mask).to(device);
  ppo::CausalLM policy(model_config(kernel, checkpointing, family), kVocab);
  policy->to(device);
  policy->train();
  const auto loss = [&](const ppo::TokenLogProbs& lp) {
    return (lp.log_probs * weights).sum() + 0.1 * (lp.entropy * weights).sum();
  };
  loss(ppo::compute_log_probs(policy, ids, mask, positions, r.R, 1.0)).backward();
  const std::vector<torch::Tensor> padded = take_gradients(*policy);
  loss(ppo::compute_log_probs_packed(policy, packed, 1.0)).backward();
  const double diff = relative_gradient_diff(take_gradients(*policy), padded);
  INFO("max |grad(packed) - grad(padded)| / max |grad| = " << diff);
  CHECK(diff <= 1e-4);
  CHECK(padded[0].abs().sum().item<double>() > 0);  // the embeddings receive gradient

  ppo::ValueModel critic(model_config(kernel, checkpointing, family), kVocab);
  critic->to(device);
  critic->train();
  const int64_t T = r.ids.size(1);
  (critic->forward(ids, positions, mask).slice(1, T - r.R - 1, T - 1) * weights).sum().backward();
  const std::vector<torch::Tensor> values_padded = take_gradients(*critic);
  const torch::Tensor hidden = critic->model->forward_packed(packed.input_ids, packed.position_ids, packed.lengths)[0];
  (ppo::unpack_responses(packed, critic->values_from_hidden(hidden.index_select(0, packed.predictors))) * weights)
      .sum()
      .backward();
  const double values_diff = relative_gradient_diff(take_gradients(*critic), values_padded);
  INFO("critic: " << values_diff);
  CHECK(values_diff <= 1e-4);
  return std::max(diff, values_diff);
}

}  // namespace

TEST_CASE("packing keeps every real token once, positions restarting per sequence", "[cpu][model][packing]") {
  const Ragged r = ragged_batch(1);
  const ppo::PackedSequences p = ppo::pack_sequences(r.ids, r.mask, r.positions, r.R);
  CHECK(p.lengths == std::vector<int64_t>({13, 5, 9, 2, 6, 7}));
  CHECK(p.tokens() == 42);
  CHECK(torch::equal(p.input_ids[0], r.ids.masked_select(r.mask.ne(0))));
  int64_t start = 0;
  for (const int64_t length : p.lengths) {
    CHECK(torch::equal(p.position_ids[0].narrow(0, start, length), torch::arange(length, torch::kInt64)));
    start += length;
  }
  // Every real response token, predicted by the token before it.
  const torch::Tensor response_mask = r.mask.narrow(1, r.ids.size(1) - r.R, r.R);
  CHECK(p.targets.size(0) == response_mask.sum().item<int64_t>());
  CHECK(torch::equal(p.labels, r.ids.narrow(1, r.ids.size(1) - r.R, r.R).reshape({-1}).index_select(0, p.targets)));
  CHECK(torch::equal(p.input_ids[0].index_select(0, p.predictors + 1), p.labels));
}

TEST_CASE("the packed attention plan covers every token once in at most its bucket count", "[cpu][model][packing]") {
  // Lengths as bucket widths see them (multiples of 64), so that each length is its own width.
  std::vector<int64_t> lengths = {5, 0, 17, 3, 17, 9, 1, 12, 2, 30, 4, 8};
  for (int64_t& l : lengths) l *= 64;
  const int64_t N = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  for (const int64_t max_buckets : {1, 3, 8, 20}) {
    INFO("max_buckets " << max_buckets);
    const ppo::PackedAttention plan =
        ppo::plan_packed_attention(lengths, /*width=*/1 << 30, torch::kFloat, torch::kCPU, max_buckets);
    CHECK(static_cast<int64_t>(plan.buckets.size()) <= max_buckets);
    int64_t slots = 0;
    double work = 0;
    std::vector<torch::Tensor> gathers;
    for (const ppo::SegmentBucket& b : plan.buckets) {
      slots += b.count * b.length;
      work += static_cast<double>(b.count * b.length * b.length);
      CHECK(b.gather.size(0) == b.count * b.length);
      gathers.push_back(b.gather);
    }
    // Every packed position has its own slot, and that slot reads it back.
    REQUIRE(plan.order.size(0) == N);
    CHECK(std::get<0>(torch::_unique(plan.order)).size(0) == N);
    CHECK(plan.order.max().item<int64_t>() < slots);
    CHECK(torch::equal(torch::cat(gathers).index_select(0, plan.order), torch::arange(N, torch::kInt64)));
    // Wide enough that padding outweighs a bucket's fixed cost: one bucket pads everything to 30, more buckets never
    // do worse, and 11 buckets pad nothing.
    if (max_buckets == 1) CHECK(work == 11 * (30 * 64) * (30 * 64));
    if (max_buckets == 20) {
      double exact = 0;
      for (const int64_t l : lengths) exact += static_cast<double>(l * l);
      CHECK(work == exact);
    }
  }
  // Narrow enough that a bucket's fixed cost outweighs all the padding: one bucket.
  CHECK(ppo::plan_packed_attention({5, 0, 17, 3, 130, 9}, /*width=*/1, torch::kFloat, torch::kCPU).buckets.size() == 1);
  // Short sequences share one width, whatever their company: 64.
  const ppo::PackedAttention short_ones = ppo::plan_packed_attention({5, 17, 3}, 1 << 30, torch::kFloat, torch::kCPU);
  REQUIRE(short_ones.buckets.size() == 1);
  CHECK(short_ones.buckets[0].length == 64);
}

TEST_CASE("packed log-probs, entropies and values equal the padded ones", "[cpu][model][packing]") {
  for (const std::string& kernel : attention_kernels()) check_packed_outputs(ragged_batch(2), kernel, torch::kCPU);
}

TEST_CASE("packed gradients equal padded gradients, plain and checkpointed", "[cpu][model][packing]") {
  for (const std::string& kernel : attention_kernels())
    for (const bool checkpointing : {false, true})
      check_packed_gradients(ragged_batch(3), kernel, checkpointing, torch::kCPU);
}

// Qwen3's q/k norms and wide heads with yarn, Mistral's sliding window (4 tokens, shorter than the 13-token rows) with
// llama3 scaling, Qwen3-MoE's and Mixtral's experts: packed equals padded through every attention kernel, forward and
// backward.
TEST_CASE("packed equals padded for the Qwen3, Mistral, Qwen3-MoE and Mixtral shapes: outputs and gradients",
          "[cpu][model][packing]") {
  for (const std::string family : {"qwen3", "mistral", "qwen3_moe", "mixtral"})
    for (const std::string& kernel : attention_kernels()) {
      check_packed_outputs(ragged_batch(2), kernel, torch::kCPU, family);
      check_packed_gradients(ragged_batch(3), kernel, /*checkpointing=*/true, torch::kCPU, family);
    }
}

// Distillation's extras: the teacher's top tokens and their log-probs (within a vocabulary bound), and the student's
// log-probs at given ids with their gradient, padded and packed, against log_softmax of the model's own logits.
TEST_CASE("the top tokens and the log-probs at given ids equal log_softmax's, packed and padded",
          "[cpu][model][packing]") {
  const Ragged r = ragged_batch(5);
  const int64_t T = r.ids.size(1), k = 5, bound = 30;
  const ppo::PackedSequences packed = ppo::pack_sequences(r.ids, r.mask, r.positions, r.R);
  const torch::Tensor response_mask = r.mask.narrow(1, T - r.R, r.R).to(torch::kFloat);
  ppo::CausalLM policy(model_config("eager", false), kVocab);
  const torch::Tensor logits = policy->forward(r.ids, r.positions, r.mask).narrow(1, T - r.R - 1, r.R).detach();
  const torch::Tensor all = torch::log_softmax(logits.to(torch::kFloat) / 0.7, -1);  // [B, R, V]
  const auto [want_top, want_ids] = all.narrow(-1, 0, bound).topk(k, -1);
  ppo::LogProbOptions teacher;
  teacher.topk = k;
  teacher.topk_vocab = bound;
  const ppo::TokenLogProbs padded = ppo::compute_log_probs(policy, r.ids, r.mask, r.positions, r.R, 0.7, 0, teacher);
  const ppo::TokenLogProbs ours = ppo::compute_log_probs_packed(policy, packed, 0.7, teacher);
  const torch::Tensor real = response_mask.unsqueeze(-1).to(torch::kBool).expand({-1, -1, k});
  for (const ppo::TokenLogProbs* lp : {&padded, &ours}) {
    CHECK(torch::equal(lp->top_ids.masked_select(real), want_ids.masked_select(real)));
    CHECK((lp->top_log_probs - want_top).masked_select(real).abs().max().item<double>() <= 1e-5);
  }
  // The student's log-probs at those ids: values, and the same gradient packed as padded.
  const torch::Tensor weights = torch::randn({r.ids.size(0), r.R, k}) * response_mask.unsqueeze(-1);
  ppo::LogProbOptions student;
  student.at_ids = want_ids;
  policy->zero_grad();
  const ppo::TokenLogProbs at = ppo::compute_log_probs(policy, r.ids, r.mask, r.positions, r.R, 0.7, 0, student);
  CHECK((at.at_log_probs - all.gather(-1, want_ids)).masked_select(real).abs().max().item<double>() <= 1e-5);
  (at.at_log_probs * weights).sum().backward();
  const std::vector<torch::Tensor> padded_grads = take_gradients(*policy);
  student.at_ids = want_ids.reshape({-1, k}).index_select(0, packed.targets);  // [M, k]
  const ppo::TokenLogProbs at_packed = ppo::compute_log_probs_packed(policy, packed, 0.7, student);
  CHECK((at_packed.at_log_probs - at.at_log_probs.detach()).masked_select(real).abs().max().item<double>() <= 1e-5);
  (at_packed.at_log_probs * weights).sum().backward();
  CHECK(relative_gradient_diff(take_gradients(*policy), padded_grads) <= 1e-4);
  CHECK(padded_grads[0].abs().sum().item<double>() > 0);
}

TEST_CASE("a packed sequence attends to no other: changing one row changes only its own log-probs",
          "[cpu][model][packing]") {
  const Ragged r = ragged_batch(5);
  Ragged changed = r;
  changed.ids = r.ids.clone();
  const int64_t row = 2;
  // New prompt and response tokens in row 2, same lengths (so the same attention plan).
  changed.ids[row] = ((r.ids[row] + 7) % kVocab) * r.mask[row];
  torch::NoGradGuard no_grad;
  for (const std::string& kernel : attention_kernels()) {
    INFO("attention " << kernel);
    ppo::CausalLM policy(model_config(kernel, false), kVocab);
    policy->eval();
    const auto log_probs = [&](const Ragged& x) {
      return ppo::compute_log_probs_packed(policy, ppo::pack_sequences(x.ids, x.mask, x.positions, x.R), 1.0).log_probs;
    };
    const torch::Tensor before = log_probs(r), after = log_probs(changed);
    for (int64_t b = 0; b < r.ids.size(0); ++b) {
      const double diff = (before[b] - after[b]).abs().max().item<double>();
      INFO("row " << b << ": max change " << diff);
      if (b == row)
        CHECK(diff > 1e-2);
      else
        CHECK(diff <= 1e-6);
    }
  }
}

// The same on the device, where training runs packed: on CUDA with each attention kernel (sdpa: LibTorch's fused
// kernels), in float32.
TEST_CASE("packed on CUDA, through sdpa and eager, equals padded: log-probs, entropies, values and gradients",
          "[gpu][model][packing]") {
  const torch::Device cuda(torch::kCUDA, 0);
  for (const std::string& kernel : attention_kernels()) {
    WARN(kernel << " on CUDA, max |packed - padded|: log-probs, entropies and values "
                << check_packed_outputs(ragged_batch(6), kernel, cuda));
    for (const bool checkpointing : {false, true})
      WARN(kernel << " on CUDA, checkpointing " << checkpointing << ", max relative gradient difference "
                  << check_packed_gradients(ragged_batch(6), kernel, checkpointing, cuda));
  }
}
