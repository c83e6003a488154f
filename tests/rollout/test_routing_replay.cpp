// Routing replay's model side: the rollout records the experts each token went through (continuous batching,
// prefill chunks, finished slots), a full forward over the same tokens routes them the same way, and a forward
// given those experts computes what the rollout computed.
#include <catch2/catch.hpp>

#include "model/transformer.h"
#include "rollout/rollout.h"
#include "tests/rollout/rollout_fixtures.h"

namespace {

using ppo_test::kPrompts;
using ppo_test::params;
using ppo_test::seeds_for;
using ppo_test::tiny_policy;

// The experts a full forward over `out`'s sequences routes each token to: [B, P + R, MoE layers, k].
torch::Tensor forward_routing(ppo::CausalLM& model, const ppo::RolloutOutput& out) {
  torch::NoGradGuard no_grad;
  model->model->record_routing = true;
  model->forward(out.input_ids, out.position_ids, out.attention_mask);
  model->model->record_routing = false;
  const torch::Tensor chosen = model->model->chosen_experts();
  return chosen.view({out.input_ids.size(0), out.input_ids.size(1), chosen.size(1), chosen.size(2)});
}

}  // namespace

TEST_CASE("the rollout records each token's experts as a full forward routes them; replayed, the logits are its",
          "[cpu][rollout][moe]") {
  for (const std::string family : {"qwen3_moe", "mixtral"}) {
    INFO(family);
    ppo::CausalLM model = tiny_policy(torch::kCPU, family);
    model->eval();
    std::vector<std::vector<int64_t>> prompts;
    for (int i = 0; i < 2; ++i) prompts.insert(prompts.end(), kPrompts.begin(), kPrompts.end());
    auto p = params(1.0);
    p.micro_batch_size = 5;  // finished slots take waiting rows
    p.prefill_micro_batch_size = 3;
    p.record_routing = true;
    const ppo::RolloutOutput out = ppo::generate_responses(model, prompts, seeds_for(prompts.size(), 7), p);
    const torch::Tensor& routed = out.routed_experts;
    const int64_t B = out.input_ids.size(0), T = out.input_ids.size(1), P = out.prompts.size(1);
    const int64_t layers = ppo::moe_layer_count(model->model->config);
    REQUIRE(routed.sizes() == torch::IntArrayRef({B, T, layers, 2}));
    CHECK(routed.scalar_type() == torch::kInt);
    CHECK_FALSE(model->model->record_routing);  // the decoder's recording ends with it

    // Recorded: every real token but a response's last, which no step fed to the model.
    const torch::Tensor real = out.attention_mask.to(torch::kBool);
    const torch::Tensor recorded = routed.select(3, 0).select(2, 0).ge(0);
    const torch::Tensor lengths = out.response_mask.sum(1).to(torch::kLong);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t last = P + lengths[b].item<int64_t>() - 1;
      INFO("row " << b);
      CHECK(recorded[b].narrow(0, P, last - P).all().item<bool>());
      CHECK_FALSE(recorded[b][last].item<bool>());
      CHECK(recorded[b].narrow(0, 0, P).logical_or(real[b].narrow(0, 0, P).logical_not()).all().item<bool>());
    }
    const torch::Tensor full = forward_routing(model, out);
    const torch::Tensor compared = recorded.logical_and(real);
    const torch::Tensor same = std::get<0>(full.sort(-1)).eq(std::get<0>(routed.to(torch::kInt).sort(-1))).all(-1);
    const int64_t pairs = compared.sum().item<int64_t>() * layers;
    const int64_t differ = (same.logical_not().logical_and(compared.unsqueeze(-1))).sum().item<int64_t>();
    WARN(family << ": " << differ << " of " << pairs << " (token, layer) pairs routed otherwise by the full forward");
    CHECK(pairs > 100);
    CHECK(differ == 0);

    // Replayed: the rollout's experts give the full forward's logits where they agree (everywhere here), and other
    // experts other logits. The real tokens' experts alone (padding routes by itself) are the full forward's own, so
    // the logits are equal bit for bit. The whole record also pins padding positions the rollout fed (a finished
    // row's slot), which can change how many rows an expert multiplies; OpenBLAS's Haswell kernels round a row's
    // product differently with the row count (1.4e-6 here), so that replay is equal within 1e-5.
    torch::NoGradGuard no_grad;
    const torch::Tensor all_routed = routed.reshape({B * T, layers, 2});
    const auto forward_with = [&](const torch::Tensor& experts) {
      model->model->replay_experts = experts;
      const torch::Tensor logits = model->forward(out.input_ids, out.position_ids, out.attention_mask);
      model->model->replay_experts = torch::Tensor();
      return logits;
    };
    const torch::Tensor logits = forward_with({});
    const torch::Tensor real_only = forward_with(torch::where(real.reshape({B * T, 1, 1}), all_routed, -1));
    const torch::Tensor replayed = forward_with(all_routed);
    const torch::Tensor other = forward_with((all_routed + 1).remainder(model->model->config.moe.num_experts));
    const torch::Tensor mask = real.unsqueeze(-1);
    CHECK(((real_only - logits).abs() * mask).max().item<double>() == 0.0);
    CHECK(((replayed - logits).abs() * mask).max().item<double>() <= 1e-5);
    CHECK(((other - logits).abs() * mask).max().item<double>() > 1e-3);
  }
}

TEST_CASE("a dense model records no routing", "[cpu][rollout][moe]") {
  ppo::CausalLM model = tiny_policy(torch::kCPU);
  auto p = params(1.0);
  p.record_routing = true;
  CHECK_FALSE(ppo::generate_responses(model, kPrompts, seeds_for(kPrompts.size(), 7), p).routed_experts.defined());
}
