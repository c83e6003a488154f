// Memory options must not change the numbers: gradient checkpointing, the offloaded AdamW, token-budget partitions;
// nor the fused AdamW kernel.
#include <torch/version.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <limits>
#include <numeric>
#include <random>

#include "common/batch.h"
#include "common/files.h"
#include "common/manifest.h"
#include "model/transformer.h"
#include "parallel/context.h"
#include "rollout/rollout.h"
#include "tests/model/small_model.h"
#include "tests/temp_dir.h"
#include "workers/memory.h"
#include "workers/optimizer.h"

namespace {

ppo::ModelConfig small_model(bool checkpointing) {
  ppo::ModelConfig c = ppo_test::small_model_config(/*num_layers=*/3, /*intermediate_size=*/64, /*seed=*/5);
  c.enable_gradient_checkpointing = checkpointing;
  return c;
}

struct Inputs {
  torch::Tensor ids, mask, positions;  // [B, T]
};

// Two rows, the first left-padded by 3 and the second by 1, so padded keys and positions are exercised.
Inputs left_padded_inputs(int64_t T, int64_t V) {
  torch::manual_seed(11);
  Inputs in;
  in.ids = torch::randint(V, {2, T}, torch::kInt64);
  in.mask = torch::ones({2, T}, torch::kInt64);
  in.mask[0].narrow(0, 0, 3).zero_();
  in.mask[1].narrow(0, 0, 1).zero_();
  in.positions = ppo::position_ids_from_mask(in.mask);
  return in;
}

// d(sum(output * weights)) / d(parameters), each parameter's gradient flattened, in registration order.
template <class Model>
std::vector<torch::Tensor> gradients(Model& model, const Inputs& in, int64_t seed, torch::Tensor* output = nullptr) {
  model->train();
  for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  torch::Tensor out = model->forward(in.ids, in.positions, in.mask);
  torch::manual_seed(seed);
  (out * torch::randn(out.sizes())).sum().backward();
  if (output) *output = out.detach();
  std::vector<torch::Tensor> grads;
  for (auto& p : model->parameters()) grads.push_back(p.grad().clone());
  return grads;
}

double max_abs_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  return worst;
}

// Peak bytes held during one forward + backward above what was held before it.
template <class Model>
int64_t activation_peak(Model& model, const Inputs& in) {
  ppo::install_memory_tracker();
  gradients(model, in, 1);  // gradients exist from here on, so both runs start with the same state
  const int64_t before = ppo::memory_stats(torch::kCPU).current_bytes;
  ppo::reset_memory_peak(torch::kCPU);
  gradients(model, in, 1);
  return ppo::memory_stats(torch::kCPU).peak_bytes - before;
}

}  // namespace

TEST_CASE("checkpointed gradients equal plain gradients, actor and critic", "[cpu][memory]") {
  const int64_t V = 40;
  Inputs in = left_padded_inputs(/*T=*/24, V);
  {
    ppo::CausalLM plain(small_model(false), V), checkpointed(small_model(true), V);
    torch::Tensor out_plain, out_checkpointed;
    auto a = gradients(plain, in, 7, &out_plain), b = gradients(checkpointed, in, 7, &out_checkpointed);
    CHECK(torch::equal(out_plain, out_checkpointed));
    double diff = max_abs_diff(a, b);
    INFO("actor: max |grad(plain) - grad(checkpointed)| = " << diff);
    CHECK(diff <= 1e-6);
    CHECK(a[1].abs().sum().item<double>() > 0);  // layer 0 receives gradient through the recomputation
  }
  {
    ppo::ValueModel plain(small_model(false), V), checkpointed(small_model(true), V);
    auto a = gradients(plain, in, 8), b = gradients(checkpointed, in, 8);
    double diff = max_abs_diff(a, b);
    INFO("critic: max |grad(plain) - grad(checkpointed)| = " << diff);
    CHECK(diff <= 1e-6);
  }
}

TEST_CASE("gradient checkpointing holds less memory during backward", "[cpu][memory]") {
  const int64_t V = 40;
  Inputs in = left_padded_inputs(/*T=*/48, V);
  ppo::CausalLM plain(small_model(false), V), checkpointed(small_model(true), V);
  const int64_t a = activation_peak(plain, in), b = activation_peak(checkpointed, in);
  WARN("3-layer model, 2 x 48 tokens: activation peak " << a << " bytes plain, " << b << " checkpointed");
  CHECK(b > 0);
  CHECK(b < a);
}

TEST_CASE("the offloaded AdamW equals torch::optim::AdamW, and its state survives save/load", "[cpu][memory]") {
  ppo::OptimConfig optim;
  optim.lr = 1e-2;
  optim.weight_decay = 0.01;
  auto fresh_params = [] {
    torch::manual_seed(2);
    return std::vector<torch::Tensor>{torch::randn({5, 3}).requires_grad_(), torch::randn({7}).requires_grad_()};
  };
  auto grads_of_step = [](int step, const torch::Tensor& p) {
    torch::manual_seed(100 + step);
    return torch::randn(p.sizes()) * (step + 1);
  };
  // The reference: LibTorch's AdamW.
  std::vector<torch::Tensor> reference = fresh_params();
  torch::optim::AdamW adamw(reference, torch::optim::AdamWOptions(optim.lr).weight_decay(optim.weight_decay));
  for (int step = 0; step < 5; ++step) {
    for (auto& p : reference) p.mutable_grad() = grads_of_step(step, p);
    adamw.step();
  }
  ppo_test::TempDir tmp;
  const std::string path = tmp.sub("actor_optim.pt");
  for (auto [grad, state] :
       std::vector<std::pair<bool, bool>>{{false, false}, {true, false}, {false, true}, {true, true}}) {
    ppo::OffloadConfig offload;
    offload.grad = grad;
    offload.optimizer = state;
    // Two steps, save, then three more in a new optimizer loaded from the file (with the other placement).
    std::vector<torch::Tensor> params = fresh_params();
    {
      ppo::Optimizer first(params, optim, /*grad_clip=*/0, /*total_steps=*/5, offload);
      for (int step = 0; step < 2; ++step) {
        for (auto& p : params) p.mutable_grad() = grads_of_step(step, p);
        first.step(ppo::Context::get());
        for (auto& p : params) CHECK_FALSE(p.grad().defined());  // released after the step
      }
      first.save(path);
      ppo::write_manifest(tmp.path.string());  // as a checkpoint carries one
    }
    ppo::OffloadConfig other;
    other.optimizer = !state;
    ppo::Optimizer second(params, optim, 0, 5, other);
    second.load(path);
    for (int step = 2; step < 5; ++step) {
      for (auto& p : params) p.mutable_grad() = grads_of_step(step, p);
      second.step(ppo::Context::get());
    }
    double diff = 0;
    for (size_t i = 0; i < params.size(); ++i)
      diff = std::max(diff, (params[i] - reference[i]).abs().max().item<double>());
    INFO("offload.grad=" << grad << " offload.optimizer=" << state << ": max |ours - torch AdamW| = " << diff);
    CHECK(diff <= 1e-7);
  }
  // Another model's state is a clear error.
  ppo::Optimizer wrong({torch::zeros({2}).requires_grad_()}, optim, 0, 5);
  CHECK_THROWS_WITH(wrong.load(path), Catch::Contains("optimizer state for another model"));
}

namespace {

// Four parameters in two dtypes (two at::_fused_adamw_ calls on the CPU).
std::vector<torch::Tensor> mixed_params() {
  torch::manual_seed(3);
  return {torch::randn({6, 4}).requires_grad_(), torch::randn({9}).requires_grad_(),
          torch::randn({3, 2, 5}, torch::kFloat64).requires_grad_(), torch::randn({4}).requires_grad_()};
}

// `optimizer`'s steps [from, to): gradients that grow with the step, so that the clip (1.0) triggers every time; the
// last parameter has none at step 2 (skipped, its step count falls behind). Checks which path ran.
void take_steps(ppo::Optimizer& optimizer, std::vector<torch::Tensor>& params, int from, int to, bool expect_fused) {
  for (int step = from; step < to; ++step) {
    torch::manual_seed(200 + step);
    for (size_t i = 0; i < params.size(); ++i)
      params[i].mutable_grad() =
          i == 3 && step == 2 ? torch::Tensor() : torch::randn(params[i].sizes(), params[i].scalar_type()) * (step + 1);
    const ppo::StepResult r = optimizer.step(ppo::Context::get());
    INFO("step " << step << ": grad_norm " << r.grad_norm);
    CHECK(r.grad_norm > 1.0);
    CHECK(r.fused == expect_fused);
  }
}

// The largest |a - b| of each tensor relative to the largest |b| of that tensor, the worst over the tensors.
double max_relative_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>() / b[i].abs().max().item<double>());
  return worst;
}

// Parameters, then first and second moments, of `optimizer`'s tensors.
std::vector<torch::Tensor> optimizer_state(const ppo::Optimizer& optimizer) {
  std::vector<torch::Tensor> state;
  for (const auto& p : optimizer.params()) state.push_back(p.detach().clone());
  for (size_t i = 0; i < optimizer.params().size(); ++i) state.push_back(optimizer.moments(i).exp_avg);
  for (size_t i = 0; i < optimizer.params().size(); ++i) state.push_back(optimizer.moments(i).exp_avg_sq);
  return state;
}

}  // namespace

TEST_CASE("the fused AdamW equals the per-tensor one under weight decay, warmup and a clip, and resumes exactly",
          "[cpu][memory]") {
  ppo::OptimConfig optim;
  optim.lr = 1e-2;
  optim.weight_decay = 0.1;
  optim.lr_warmup_steps = 3;
  optim.warmup_style = "cosine";
  optim.min_lr_ratio = 0.1;
  const double clip = 1.0;
  const int64_t total_steps = 6;
  const bool fused = ppo::fused_adamw_available();

  std::vector<torch::Tensor> params_per_tensor = mixed_params(), params_fused = mixed_params();
  ppo::Optimizer per_tensor(params_per_tensor, optim, clip, total_steps);
  per_tensor.set_fused(false);
  take_steps(per_tensor, params_per_tensor, 0, 6, /*expect_fused=*/false);
  ppo::Optimizer whole(params_fused, optim, clip, total_steps);
  take_steps(whole, params_fused, 0, 6, fused);
  for (size_t i = 0; i < params_fused.size(); ++i) {
    CHECK(whole.moments(i).steps == (i == 3 ? 5 : 6));
    CHECK(per_tensor.moments(i).steps == whole.moments(i).steps);
  }
  // The kernel orders its float arithmetic differently: equal to 1e-6 of each tensor's largest value. Without it
  // both optimizers run the per-tensor path, so they must agree exactly.
  const double diff = max_relative_diff(optimizer_state(whole), optimizer_state(per_tensor));
  WARN((fused ? "fused AdamW (at::_fused_adamw_)" : "no fused AdamW (LibTorch < 2.4): both per tensor")
       << ", LibTorch " << TORCH_VERSION << ": max relative |fused - per-tensor| over parameters and moments after 6 "
       << "steps = " << diff);
  CHECK(diff <= (fused ? 1e-6 : 0.0));

  // 3 steps, save, load into a new optimizer, 3 more: the same bits as the 6 steps without a save.
  ppo_test::TempDir tmp;
  const std::string path = tmp.sub("actor_optim.pt");
  std::vector<torch::Tensor> params_resumed = mixed_params();
  {
    ppo::Optimizer first(params_resumed, optim, clip, total_steps);
    take_steps(first, params_resumed, 0, 3, fused);
    first.save(path);
    ppo::write_manifest(tmp.path.string());
  }
  ppo::Optimizer second(params_resumed, optim, clip, total_steps);
  second.load(path);
  second.set_steps_taken(3);  // as the trainer does from its state
  take_steps(second, params_resumed, 3, 6, fused);
  const std::vector<torch::Tensor> resumed = optimizer_state(second), unsaved = optimizer_state(whole);
  for (size_t i = 0; i < resumed.size(); ++i) {
    INFO("tensor " << i);
    CHECK(torch::equal(resumed[i], unsaved[i]));
  }
  for (size_t i = 0; i < params_resumed.size(); ++i) CHECK(second.moments(i).steps == whole.moments(i).steps);
}

TEST_CASE("parameters offloaded between phases come back unchanged and keep their identity", "[cpu][memory]") {
  ppo::CausalLM model(small_model(false), 40);
  auto params = model->parameters();
  std::vector<torch::Tensor> before;
  std::vector<const void*> buffers;
  // `held` keeps each parameter's first storage alive, so the allocator cannot hand its address to the copy.
  std::vector<torch::Tensor> held;
  for (auto& p : params)
    before.push_back(p.detach().clone()), buffers.push_back(p.data_ptr()), held.push_back(p.detach());
  ppo::ParamPlacement placement(params, torch::kCPU, /*offload=*/true);
  {
    ppo::OnDevice on(placement);
    for (size_t i = 0; i < params.size(); ++i) {
      CHECK(params[i].data_ptr() != buffers[i]);  // a real copy, also host to host
      CHECK(torch::equal(params[i], before[i]));
    }
  }
  for (size_t i = 0; i < params.size(); ++i) CHECK(torch::equal(model->parameters()[i], before[i]));
}

TEST_CASE("token-budget partition: within budget, every row once, balanced, over-budget rows alone", "[cpu][memory]") {
  std::mt19937 rng(3);
  std::vector<ppo::RowLengths> lengths;
  for (int i = 0; i < 40; ++i)
    lengths.push_back({static_cast<int64_t>(rng() % 20 + 1), static_cast<int64_t>(rng() % 30 + 1)});
  lengths[7] = {60, 50};  // over a budget of 100 on its own
  std::vector<int64_t> over;
  auto groups = ppo::partition_by_tokens(lengths, 100, &over);
  CHECK(over == std::vector<int64_t>{7});
  std::vector<int> seen(lengths.size(), 0);
  int64_t largest = 0, smallest = 1 << 30;
  for (const auto& g : groups) {
    int64_t prompt = 0, response = 0;
    for (int64_t row : g) {
      seen[row] += 1;
      prompt = std::max(prompt, lengths[row].prompt);
      response = std::max(response, lengths[row].response);
    }
    const int64_t cost = static_cast<int64_t>(g.size()) * (prompt + response);
    if (g == std::vector<int64_t>{7}) continue;
    CHECK(cost <= 100);
    largest = std::max(largest, cost);
    smallest = std::min(smallest, cost);
  }
  for (int s : seen) CHECK(s == 1);
  // The over-budget row is alone; the rest are balanced below the budget.
  CHECK(std::count(groups.begin(), groups.end(), std::vector<int64_t>{7}) == 1);
  WARN(groups.size() << " micro-batches, padded tokens between " << smallest << " and " << largest);
  CHECK(largest <= 100);
  CHECK(ppo::partition_by_tokens(lengths, 100) == groups);  // deterministic
  // A budget that holds everything gives one micro-batch.
  std::vector<ppo::RowLengths> few = {{3, 4}, {5, 1}, {2, 2}};
  CHECK(ppo::partition_by_tokens(few, 1000).size() == 1);
}

TEST_CASE("token-budget partition: its largest micro-batch is the smallest any cut of that many gives",
          "[cpu][memory]") {
  // Brute force over every cut of the length-sorted rows into the same number of contiguous groups.
  std::mt19937 rng(9);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<ppo::RowLengths> lengths;
    for (int i = 0; i < 9; ++i)
      lengths.push_back({static_cast<int64_t>(rng() % 12 + 1), static_cast<int64_t>(rng() % 12 + 1)});
    const int64_t budget = 60;
    auto groups = ppo::partition_by_tokens(lengths, budget);
    auto cost = [&](const std::vector<int64_t>& rows) {
      int64_t p = 0, r = 0;
      for (int64_t row : rows) p = std::max(p, lengths[row].prompt), r = std::max(r, lengths[row].response);
      return static_cast<int64_t>(rows.size()) * (p + r);
    };
    int64_t ours = 0;
    for (const auto& g : groups) ours = std::max(ours, cost(g));
    std::vector<int64_t> order(lengths.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return lengths[a].prompt + lengths[a].response > lengths[b].prompt + lengths[b].response;
    });
    const size_t k = groups.size(), n = order.size();
    int64_t best = std::numeric_limits<int64_t>::max();
    size_t fewest_within_budget = n;
    for (uint32_t cuts = 0; cuts < (1u << (n - 1)); ++cuts) {  // bit i: a cut after sorted row i
      std::vector<std::vector<int64_t>> split(1);
      for (size_t i = 0; i < n; ++i) {
        split.back().push_back(order[i]);
        if (i + 1 < n && (cuts >> i & 1)) split.emplace_back();
      }
      int64_t worst = 0;
      for (const auto& g : split) worst = std::max(worst, cost(g));
      if (worst <= budget) fewest_within_budget = std::min(fewest_within_budget, split.size());
      if (split.size() == k) best = std::min(best, worst);
    }
    INFO("trial " << trial << ": " << k << " groups, largest " << ours << ", best possible " << best);
    CHECK(k == fewest_within_budget);
    CHECK(ours == best);
  }
}

TEST_CASE("token-budget partition of packed micro-batches counts real tokens: fewer micro-batches, each within budget",
          "[cpu][memory][packing]") {
  std::mt19937 rng(5);
  std::vector<ppo::RowLengths> lengths;
  for (int i = 0; i < 48; ++i)  // short and long responses mixed, as EOS gives them
    lengths.push_back(
        {static_cast<int64_t>(rng() % 10 + 4), static_cast<int64_t>(rng() % 4 == 0 ? 40 : rng() % 8 + 1)});
  const int64_t budget = 120;
  const auto packed = ppo::partition_by_tokens(lengths, budget, nullptr, /*packed=*/true);
  const auto padded = ppo::partition_by_tokens(lengths, budget);
  std::vector<int> seen(lengths.size(), 0);
  for (const auto& g : packed) {
    int64_t tokens = 0;
    for (int64_t row : g) tokens += lengths[row].prompt + lengths[row].response, seen[row] += 1;
    CHECK(tokens <= budget);
  }
  for (int s : seen) CHECK(s == 1);
  WARN("micro-batches within " << budget << " tokens: " << packed.size() << " packed, " << padded.size() << " padded");
  CHECK(packed.size() < padded.size());
}
