// The mixture-of-experts layers (model/moe.h) without transformers: the grouped products against a loop over tokens
// in float64, routing replay, the MoE keys' checks, and the expert tensors of Hugging Face folders
// (model/hf_experts.h): read back equal, sharded reads equal whole ones, and missing or misshapen experts refused by
// name.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

#include "model/hf.h"
#include "model/model_shape.h"
#include "model/moe.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "tests/model/small_model.h"
#include "tests/temp_dir.h"
#include "tests/usage_error.h"
#include "text/tokenizers.h"

namespace {

// sum_j w[t, j] * down_e(silu(gate_e(x_t)) * up_e(x_t)) token by token, expert by expert: the definition.
torch::Tensor experts_by_token(const torch::Tensor& x, const torch::Tensor& indices, const torch::Tensor& weights,
                               const torch::Tensor& gate_up, const torch::Tensor& down) {
  const int64_t I = down.size(2);
  std::vector<torch::Tensor> rows;
  for (int64_t t = 0; t < x.size(0); ++t) {
    torch::Tensor sum = torch::zeros({x.size(1)}, x.options());
    for (int64_t j = 0; j < indices.size(1); ++j) {
      const int64_t e = indices[t][j].item<int64_t>();
      const torch::Tensor h = torch::mv(gate_up[e], x[t]);
      sum = sum + weights[t][j] * torch::mv(down[e], torch::silu(h.narrow(0, 0, I)) * h.narrow(0, I, I));
    }
    rows.push_back(sum);
  }
  return torch::stack(rows);
}

ppo::ModelConfig moe_config(const std::string& family) {
  ppo::ModelConfig c = ppo_test::with_family(ppo_test::small_model_config(/*num_layers=*/2, 48, /*seed=*/5), family);
  c.init_std = 0.2;
  return c;
}

}  // namespace

TEST_CASE("grouped expert products equal the token-by-token definition, values and gradients", "[cpu][model][moe]") {
  torch::manual_seed(7);
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  const int64_t N = 37, D = 12, I = 10, E = 6, k = 3;
  const torch::Tensor x = torch::randn({N, D}, f64).requires_grad_();
  const torch::Tensor gate_up = (torch::randn({E, 2 * I, D}, f64) * 0.3).requires_grad_();
  const torch::Tensor down = (torch::randn({E, D, I}, f64) * 0.3).requires_grad_();
  torch::Tensor indices = torch::empty({N, k}, torch::kLong);
  for (int64_t t = 0; t < N; ++t) indices[t] = torch::randperm(E - 1).narrow(0, 0, k);  // the last expert gets none
  const torch::Tensor weights = torch::rand({N, k}, f64).requires_grad_();
  const torch::Tensor grouped = ppo::grouped_experts(x, indices, weights, gate_up, down);
  const torch::Tensor reference = experts_by_token(x, indices, weights, gate_up, down);
  CHECK((grouped - reference).abs().max().item<double>() <= 1e-12);
  const torch::Tensor probe = torch::randn({N, D}, f64);
  const auto grads = [&](const torch::Tensor& out) {
    return torch::autograd::grad({(out * probe).sum()}, {x, weights, gate_up, down});
  };
  const auto a = grads(grouped), b = grads(reference);
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("gradient " << i);
    CHECK((a[i] - b[i]).abs().max().item<double>() <= 1e-12);
  }
}

TEST_CASE("routing replay: a layer given the experts it chose computes the same; given others, theirs",
          "[cpu][model][moe]") {
  for (const std::string family : {"qwen3_moe", "mixtral"}) {
    INFO(family);
    const ppo::ModelConfig c = moe_config(family);
    ppo::MoeBlock block(c);
    ppo::init_parameters(*block, "mlp.", 3, 0.3);
    torch::manual_seed(1);
    const torch::Tensor x = torch::randn({2, 9, c.hidden_size});
    const auto routing = ppo::make_moe_routing(c, {});
    routing->record = true;
    const torch::Tensor out = block->forward(x, routing, 0);
    const torch::Tensor chosen = routing->chosen[0];
    REQUIRE(chosen.sizes() == torch::IntArrayRef({18, 2}));
    const auto replayed = ppo::make_moe_routing(c, {});
    replayed->replay[0] = chosen;
    CHECK(torch::equal(block->forward(x, replayed, 0), out));
    // Other experts: the router's probabilities at them, renormalised where the family does.
    const torch::Tensor other = (chosen + 1).remainder(c.moe.num_experts);
    replayed->replay[0] = other;
    const torch::Tensor rows = x.reshape({-1, c.hidden_size});
    torch::Tensor weights = torch::softmax(block->gate(rows), -1).gather(1, other);
    if (c.moe.norm_topk_prob) weights = weights / weights.sum(-1, true);
    const torch::Tensor expected =
        experts_by_token(rows, other, weights, block->experts->gate_up_proj, block->experts->down_proj);
    CHECK((block->forward(x, replayed, 0).reshape({-1, c.hidden_size}) - expected).abs().max().item<double>() <= 1e-5);
  }
}

TEST_CASE("MoE keys are checked: the families, top-k within the experts, dense layers that exist",
          "[cpu][model][moe]") {
  const auto error = [](const ppo::ModelConfig& c) {
    return ppo_test::usage_error_message([&] { ppo::validate_model_config(c, 10); });
  };
  ppo::ModelConfig c = moe_config("qwen3_moe");
  CHECK(error(c).empty());
  c.moe.num_experts_per_tok = 9;
  CHECK_THAT(error(c), Catch::Contains("model.moe.num_experts_per_tok (9) must not exceed model.moe.num_experts (8)"));
  c = moe_config("qwen3_moe");
  c.moe.mlp_only_layers = {2};
  CHECK_THAT(error(c), Catch::Contains("model.moe.mlp_only_layers: layer 2"));
  c = moe_config("qwen3_moe");
  c.moe.num_experts = 0;
  CHECK_THAT(error(c), Catch::Contains("set model.moe.num_experts"));
  c = moe_config("");
  c.moe.num_experts = 4;
  CHECK_THAT(error(c), Catch::Contains("has no mixture-of-experts layers"));
  c = moe_config("mixtral");
  c.moe.mlp_only_layers = {0};
  CHECK_THAT(error(c), Catch::Contains("model.moe.mlp_only_layers=[]"));
  // Total and active parameters: the experts a token runs through.
  c = moe_config("qwen3_moe");
  ppo::CausalLM model(c, 10);
  CHECK(ppo::model_parameters(c, 10) == static_cast<double>(ppo::parameter_count(*model)));
  CHECK(ppo::model_parameters(c, 10) - ppo::model_parameters(c, 10, /*active=*/true) ==
        6.0 * 3 * c.hidden_size * 24);  // 8 - 2 experts of the one MoE layer, 3 D x 24 each
}

TEST_CASE("MoE folders: experts stored per expert read back equal, in parts too; missing or misshapen ones refused",
          "[cpu][model][moe][hf]") {
  ppo_test::TempDir tmp("ppo_moe_hf");
  for (const std::string family : {"qwen3_moe", "mixtral"}) {
    INFO(family);
    const ppo::ModelConfig c = moe_config(family);
    ppo::CausalLM model(c, 99);
    const std::string dir = tmp.sub(family);
    ppo::export_hf(model, c, dir, *ppo::make_tokenizer("char"), "char");
    std::map<std::string, torch::Tensor> stored = ppo::load_safetensors(dir + "/model.safetensors");
    const std::string layer = "model.layers.0.";
    const std::string expert3 =
        family == "mixtral" ? layer + "block_sparse_moe.experts.3.w3.weight" : layer + "mlp.experts.3.up_proj.weight";
    REQUIRE(stored.count(expert3) == 1);
    CHECK(stored.count(layer + (family == "mixtral" ? "block_sparse_moe.gate.weight" : "mlp.gate.weight")) == 1);
    CHECK(stored.count(layer + "mlp.experts.gate_up_proj") == 0);

    const ppo::HfModelInfo info = ppo::read_hf_config(dir, ppo::ModelConfig{});
    CHECK(info.config.moe.num_experts == c.moe.num_experts);
    CHECK(info.config.moe.mlp_only_layers == c.moe.mlp_only_layers);
    CHECK(info.config.moe.norm_topk_prob == c.moe.norm_topk_prob);
    ppo::CausalLM loaded(info.config, 99);
    ppo::load_hf_weights(*loaded, dir, false);
    ppo_test::require_equal_states(ppo_test::state_of(*model), ppo_test::state_of(*loaded));
    // A rank's slice of the stacked experts, across the per-expert tensors.
    const ppo::HfWeightParts parts(dir, false, c.qk_norm);
    for (const char* name : {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}) {
      const torch::Tensor param = model->named_parameters()[layer + name];
      parts.check(layer + name, param);
      const int64_t first = param.numel() / 3 + 5, count = param.numel() / 2;
      CHECK(torch::equal(parts.part(layer + name, param, first, count), param.reshape({-1}).narrow(0, first, count)));
    }

    std::map<std::string, torch::Tensor> damaged = stored;
    damaged.erase(expert3);
    ppo::save_safetensors(dir + "/model.safetensors", damaged, nlohmann::json{{"format", "pt"}});
    ppo::CausalLM again(info.config, 99);
    CHECK_THAT(ppo_test::usage_error_message([&] { ppo::load_hf_weights(*again, dir, false); }),
               Catch::Contains("missing tensor(s) " + expert3));
    CHECK_THAT(ppo_test::usage_error_message([&] {
                 ppo::HfWeightParts(dir, false, c.qk_norm)
                     .check(layer + "mlp.experts.gate_up_proj",
                            model->named_parameters()[layer + "mlp.experts.gate_up_proj"]);
               }),
               Catch::Contains(expert3));
    damaged[expert3] = torch::zeros({5, c.hidden_size});
    ppo::save_safetensors(dir + "/model.safetensors", damaged, nlohmann::json{{"format", "pt"}});
    CHECK_THAT(ppo_test::usage_error_message([&] { ppo::load_hf_weights(*again, dir, false); }),
               Catch::Contains("tensor '" + expert3 + "' has shape [5, 32]"));
  }
}

TEST_CASE("MoE config.json fields ppo.cpp does not build are refused by name", "[cpu][model][moe][hf]") {
  ppo_test::TempDir tmp("ppo_moe_config");
  const ppo::ModelConfig c = moe_config("qwen3_moe");
  ppo::CausalLM model(c, 99);
  const std::string dir = tmp.sub("qwen3_moe");
  ppo::export_hf(model, c, dir, *ppo::make_tokenizer("char"), "char");
  nlohmann::json original;
  std::ifstream(dir + "/config.json") >> original;
  const auto refused = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json j = original;
    j[key] = value;
    std::ofstream(dir + "/config.json") << j.dump(2);
    return ppo_test::usage_error_message([&] { ppo::read_hf_config(dir, ppo::ModelConfig{}); });
  };
  CHECK_THAT(refused("shared_expert_intermediate_size", 64),
             Catch::Contains("field \"shared_expert_intermediate_size\" is 64; shared experts are not built"));
  CHECK_THAT(refused("router_jitter_noise", 0.01), Catch::Contains("field \"router_jitter_noise\" is 0.01"));
  CHECK_THAT(refused("num_experts_per_tok", 9), Catch::Contains("field \"num_experts_per_tok\" is 9"));
  CHECK_THAT(refused("mlp_only_layers", nlohmann::json::array({7})),
             Catch::Contains("field \"mlp_only_layers\" has 7"));
  CHECK_THAT(refused("scoring_func", "sigmoid"), Catch::Contains("field \"scoring_func\" is \"sigmoid\""));
  CHECK(refused("output_router_logits", true).empty());
}
