// LoRA on the transformer (model/lora.h): the adapted model starts as its base, adapters off is the base, merged
// equals adapted, the fused decoding weights carry the adapters, PEFT's names and files, and bad targets.
#include <catch2/catch.hpp>

#include "common/error.h"
#include "decode/fused_weights.h"
#include "model/lora.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "tests/model/small_model.h"
#include "tests/temp_dir.h"

namespace {

ppo::ModelConfig lora_model_config() {
  ppo::ModelConfig c = ppo_test::small_model_config(/*num_layers=*/2, /*intermediate_size=*/48, /*seed=*/5);
  c.attention_bias = true;
  c.tie_word_embeddings = false;
  c.init_std = 0.2;
  return c;
}

ppo::LoraConfig lora_config(int64_t rank, bool init_lora_weights) {
  ppo::LoraConfig lora;
  lora.rank = rank;
  lora.alpha = 16;
  lora.init_lora_weights = init_lora_weights;
  return lora;
}

torch::Tensor logits_of(ppo::CausalLM& model, const torch::Tensor& ids) {
  torch::NoGradGuard no_grad;
  model->eval();
  auto positions = torch::arange(ids.size(1)).unsqueeze(0).expand_as(ids).contiguous();
  return model->forward(ids, positions);
}

const torch::Tensor kIds = torch::tensor({{5, 9, 17, 3, 40, 22, 8, 61}, {7, 7, 30, 12, 55, 2, 19, 4}}, torch::kLong);

// The logits of `model` decoding kIds token by token with the KV cache (an MoE layer runs its block there too).
torch::Tensor decoded_logits(ppo::CausalLM& model) {
  torch::NoGradGuard no_grad;
  model->eval();
  ppo::KVCache cache;
  cache.projections = ppo::fuse_weights(*model->model, /*rows=*/kIds.size(0));
  std::vector<torch::Tensor> steps;
  for (int64_t t = 0; t < kIds.size(1); ++t)
    steps.push_back(model->forward(kIds.slice(1, t, t + 1).contiguous(),
                                   torch::full({kIds.size(0), 1}, t, torch::kLong),
                                   torch::ones({kIds.size(0), t + 1}, torch::kLong), &cache));
  return torch::cat(steps, 1);
}

}  // namespace

TEST_CASE("a model with fresh adapters equals its base, and adapters off is the base at any weights", "[cpu][lora]") {
  const ppo::ModelConfig c = lora_model_config();
  ppo::CausalLM base(c, 99), adapted(c, 99);
  ppo::add_lora(*adapted->model, lora_config(4, /*init_lora_weights=*/true), "actor.lora", c.seed);
  // PEFT's initialisation: B zero, so B A x adds exact zeros.
  CHECK(torch::equal(logits_of(base, kIds), logits_of(adapted, kIds)));
  // 7 adapters per layer, each an A and a B.
  int64_t adapters = 0;
  for (const auto& item : adapted->named_parameters())
    if (ppo::is_lora_parameter(item.key())) ++adapters;
  CHECK(adapters == 2 * 7 * c.num_layers);

  ppo::CausalLM random(c, 99);
  ppo::add_lora(*random->model, lora_config(4, /*init_lora_weights=*/false), "actor.lora", c.seed);
  const torch::Tensor with = logits_of(random, kIds);
  const double moved = (with - logits_of(base, kIds)).abs().max().item<double>();
  INFO("random B moves the logits by " << moved);
  CHECK(moved > 1e-3);
  {
    ppo::LoraDisabled off(*random->model);
    CHECK(torch::equal(logits_of(random, kIds), logits_of(base, kIds)));
  }
  CHECK(torch::equal(logits_of(random, kIds), with));  // back on
}

TEST_CASE("merged adapters equal the adapter path, and so do the fused decoding weights", "[cpu][lora]") {
  const ppo::ModelConfig c = lora_model_config();
  ppo::CausalLM model(c, 99);
  ppo::add_lora(*model->model, lora_config(8, /*init_lora_weights=*/false), "actor.lora", c.seed);
  const torch::Tensor adapted = logits_of(model, kIds);
  // Decoding with the KV cache and fused (merged) projections, token by token, against the full forward.
  const double decoded = (decoded_logits(model) - adapted).abs().max().item<double>();
  INFO("cached, fused decoding against the full forward: " << decoded);
  CHECK(decoded < 1e-4);
  ppo::merge_lora(*model->model);
  const double diff = (logits_of(model, kIds) - adapted).abs().max().item<double>();
  INFO("merged against adapted: " << diff);
  CHECK(diff < 1e-4);
}

TEST_CASE("PEFT names and files, and a PEFT folder of another shape or rank is named", "[cpu][lora]") {
  const ppo::ModelConfig c = lora_model_config();
  ppo::CausalLM model(c, 99);
  const ppo::LoraConfig lora = lora_config(4, /*init_lora_weights=*/false);
  ppo::add_lora(*model->model, lora, "actor.lora", c.seed);
  const auto tensors = ppo::peft_adapter_tensors(*model);
  CHECK(tensors.count("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight") == 1);
  CHECK(tensors.count("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight") == 1);
  CHECK(tensors.size() == 2 * 7 * static_cast<size_t>(c.num_layers));

  ppo_test::TempDir tmp;
  ppo::save_peft_adapter(*model, lora, tmp.path.string(), "base");
  ppo::CausalLM other(c, 99);
  ppo::add_lora(*other->model, lora_config(4, /*init_lora_weights=*/true), "actor.lora", c.seed + 1);
  ppo::load_peft_adapter(*other, lora, tmp.path.string());
  CHECK(torch::equal(logits_of(other, kIds), logits_of(model, kIds)));

  // Another rank: named with both values.
  ppo::CausalLM rank8(c, 99);
  ppo::add_lora(*rank8->model, lora_config(8, true), "actor.lora", c.seed);
  CHECK_THROWS_WITH(ppo::load_peft_adapter(*rank8, lora_config(8, true), tmp.path.string()),
                    Catch::Contains("r is 4, actor.lora.rank is 8"));
  // A wider model: the adapter's tensors have another shape.
  ppo::ModelConfig wide = c;
  wide.hidden_size = 64;
  ppo::CausalLM wider(wide, 99);
  ppo::add_lora(*wider->model, lora, "actor.lora", c.seed);
  CHECK_THROWS_WITH(ppo::load_peft_adapter(*wider, lora, tmp.path.string()),
                    Catch::Contains("the adapter was made for a model of another shape"));
}

TEST_CASE("LoRA's bad settings are named: a module the model lacks, rank < 0", "[cpu][lora]") {
  ppo::LoraConfig lora = lora_config(4, true);
  lora.target_modules = {"q_proj", "c_attn"};
  CHECK_THROWS_AS(ppo::lora_targets(lora, "actor.lora"), ppo::UsageError);
  CHECK_THROWS_WITH(ppo::lora_targets(lora, "actor.lora"),
                    Catch::Contains("actor.lora.target_modules: the model has no linear layer 'c_attn'"));
  lora.target_modules = {"all-linear"};
  lora.rank = -1;
  CHECK_THROWS_WITH(ppo::lora_targets(lora, "critic.lora"),
                    Catch::Contains("critic.lora.rank=-1 is out of range: 0 (off) to 65536"));
  lora.rank = 2;
  lora.target_modules = {"v_proj", "q_proj"};
  CHECK(ppo::lora_targets(lora, "actor.lora") == std::vector<std::string>{"q_proj", "v_proj"});
}

namespace {

// A random Qwen3-MoE-shaped model (layer 0 MoE: 8 experts, 24 wide; layer 1 dense) with adapters of rank 4, random
// B, on q_proj and on both expert weights (named as PEFT matches them: a dotted suffix).
ppo::ModelConfig moe_lora_model_config() {
  ppo::ModelConfig c = ppo_test::with_family(ppo_test::small_model_config(2, 48, 5), "qwen3_moe");
  c.init_std = 0.2;
  c.tie_word_embeddings = false;
  return c;
}

ppo::LoraConfig expert_lora(bool init_lora_weights) {
  ppo::LoraConfig lora = lora_config(4, init_lora_weights);
  lora.target_modules = {"q_proj"};
  lora.target_parameters = {"gate_up_proj", "experts.down_proj"};
  return lora;
}

}  // namespace

TEST_CASE("adapters on an MoE model's stacked experts: base at start and off, decoding and merging equal, PEFT's names",
          "[cpu][lora][moe]") {
  const ppo::ModelConfig c = moe_lora_model_config();
  ppo::CausalLM base(c, 99), fresh(c, 99), model(c, 99);
  ppo::add_lora(*fresh->model, expert_lora(/*init_lora_weights=*/true), "actor.lora", c.seed);
  CHECK(torch::equal(logits_of(fresh, kIds), logits_of(base, kIds)));
  const ppo::LoraConfig lora = expert_lora(/*init_lora_weights=*/false);
  ppo::add_lora(*model->model, lora, "actor.lora", c.seed);
  // q_proj's on both layers; on the MoE layer one adapter of rank 4 x 8 experts per expert weight, none on the dense.
  int64_t numel = 0;
  for (const auto& item : model->named_parameters())
    if (ppo::is_lora_parameter(item.key())) numel += item.value().numel();
  CHECK(static_cast<double>(numel) == ppo::lora_parameters(lora, c));
  const auto tensors = ppo::peft_adapter_tensors(*model);
  CHECK(tensors.size() == 2 * 2 + 2 * 2);
  // PEFT nests gate_up_proj's wrapper under down_proj's: "experts.base_layer" is gate_up_proj's.
  CHECK(tensors.at("base_model.model.model.layers.0.mlp.experts.base_layer.lora_A.weight").sizes() ==
        torch::IntArrayRef({4 * 8, 32}));
  CHECK(tensors.at("base_model.model.model.layers.0.mlp.experts.base_layer.lora_B.weight").sizes() ==
        torch::IntArrayRef({2 * 24, 4 * 8}));
  CHECK(tensors.at("base_model.model.model.layers.0.mlp.experts.lora_A.weight").sizes() ==
        torch::IntArrayRef({4 * 8, 24}));

  const torch::Tensor adapted = logits_of(model, kIds);
  const double moved = (adapted - logits_of(base, kIds)).abs().max().item<double>();
  INFO("the expert adapters move the logits by " << moved);
  CHECK(moved > 1e-3);
  {
    ppo::LoraDisabled off(*model->model);
    CHECK(torch::equal(logits_of(model, kIds), logits_of(base, kIds)));
  }
  CHECK((decoded_logits(model) - adapted).abs().max().item<double>() < 1e-4);

  // PEFT's files, read back into fresh adapters.
  ppo_test::TempDir tmp;
  ppo::save_peft_adapter(*model, lora, tmp.path.string(), "base");
  ppo::load_peft_adapter(*fresh, lora, tmp.path.string());
  CHECK(torch::equal(logits_of(fresh, kIds), adapted));
  // An adapter on down_proj alone is PEFT's only ParamWrapper there: "experts.lora_A", and a folder of both is
  // refused with the settings named.
  ppo::LoraConfig down_only = lora;
  down_only.target_parameters = {"mlp.experts.down_proj"};
  ppo::CausalLM down(c, 99);
  ppo::add_lora(*down->model, down_only, "actor.lora", c.seed);
  CHECK(ppo::peft_adapter_tensors(*down).at("base_model.model.model.layers.0.mlp.experts.lora_A.weight").sizes() ==
        torch::IntArrayRef({4 * 8, 24}));
  CHECK_THROWS_WITH(ppo::load_peft_adapter(*down, down_only, tmp.path.string()),
                    Catch::Contains("differ from actor.lora.target_parameters"));

  // The gradient reaches every expert adapter.
  model->train();
  for (auto& item : model->named_parameters()) item.value().set_requires_grad(ppo::is_lora_parameter(item.key()));
  const auto positions = torch::arange(kIds.size(1)).unsqueeze(0).expand_as(kIds).contiguous();
  model->forward(kIds, positions).pow(2).mean().backward();
  for (const auto& item : model->named_parameters())
    if (item.key().find(".experts.") != std::string::npos && ppo::is_lora_parameter(item.key())) {
      INFO(item.key());
      CHECK(item.value().grad().abs().sum().item<double>() > 0);
    }

  ppo::merge_lora(*model->model);
  CHECK((logits_of(model, kIds) - adapted).abs().max().item<double>() < 1e-4);
}

TEST_CASE("adapters on experts: a weight that is no expert's, dropout, a dense model and too high a rank are named",
          "[cpu][lora][moe]") {
  const ppo::ModelConfig moe = moe_lora_model_config();
  ppo::LoraConfig lora = expert_lora(true);
  lora.target_parameters = {"mlp.experts.up_proj"};
  CHECK_THROWS_WITH(ppo::check_lora(lora, moe, "actor.lora"),
                    Catch::Contains("actor.lora.target_parameters: 'mlp.experts.up_proj' names no expert weight"));
  lora = expert_lora(true);
  lora.dropout = 0.1;
  CHECK_THROWS_WITH(ppo::check_lora(lora, moe, "actor.lora"), Catch::Contains("an expert adapter has no dropout"));
  lora = expert_lora(true);
  CHECK_THROWS_WITH(ppo::check_lora(lora, lora_model_config(), "critic.lora"),
                    Catch::Contains("critic.lora.target_parameters names experts and the model has none"));
  lora.rank = 25;  // down_proj is [32, 24] per expert
  lora.target_modules = {};
  CHECK_THROWS_WITH(ppo::check_lora(lora, moe, "actor.lora"),
                    Catch::Contains("above the smaller side of mlp.experts.down_proj [32, 24]"));
}

TEST_CASE("LoRA's dropout: only in training mode, and a checkpointed layer's recomputation draws the same masks",
          "[cpu][lora]") {
  ppo::ModelConfig c = lora_model_config();
  ppo::LoraConfig lora = lora_config(4, /*init_lora_weights=*/false);
  lora.dropout = 0.5;
  ppo::CausalLM model(c, 99);
  ppo::add_lora(*model->model, lora, "actor.lora", c.seed);
  const auto positions = torch::arange(kIds.size(1)).unsqueeze(0).expand_as(kIds).contiguous();
  // Eval mode: no dropout, the same logits twice; EvalMode restores the training mode after.
  model->train();
  torch::Tensor a, b;
  {
    torch::NoGradGuard no_grad;
    ppo::EvalMode eval(*model);
    a = model->forward(kIds, positions);
    b = model->forward(kIds, positions);
  }
  CHECK(model->is_training());
  CHECK(torch::equal(a, b));
  {
    torch::NoGradGuard no_grad;
    CHECK_FALSE(torch::equal(model->forward(kIds, positions), a));  // training mode drops
  }
  // Gradients with dropout, plain and checkpointed from the same random state: equal.
  const auto gradients = [&](bool checkpointing) {
    c.enable_gradient_checkpointing = checkpointing;
    ppo::CausalLM m(c, 99);
    ppo::add_lora(*m->model, lora, "actor.lora", c.seed);
    for (auto& item : m->named_parameters()) item.value().set_requires_grad(ppo::is_lora_parameter(item.key()));
    m->train();
    torch::manual_seed(11);
    m->forward(kIds, positions).pow(2).sum().backward();
    std::map<std::string, torch::Tensor> grads;
    for (const auto& item : m->named_parameters())
      if (ppo::is_lora_parameter(item.key())) grads[item.key()] = item.value().grad().clone();
    return grads;
  };
  const auto plain = gradients(false), checkpointed = gradients(true);
  REQUIRE(plain.size() == checkpointed.size());
  for (const auto& [name, g] : plain) {
    INFO(name);
    CHECK(torch::allclose(g, checkpointed.at(name), /*rtol=*/1e-5, /*atol=*/1e-6));
  }
}
