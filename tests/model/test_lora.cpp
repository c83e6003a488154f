// LoRA on the transformer (model/lora.h): the adapted model starts as its base, adapters off is the base, merged
// equals adapted, the fused decoding weights carry the adapters, PEFT's names and files, and bad targets.
#include <catch2/catch.hpp>

#include "common/error.h"
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
  {
    torch::NoGradGuard no_grad;
    ppo::KVCache cache;
    cache.fused = model->model->fused_weights();
    std::vector<torch::Tensor> steps;
    for (int64_t t = 0; t < kIds.size(1); ++t) {
      auto ids = kIds.slice(1, t, t + 1).contiguous();
      auto positions = torch::full({kIds.size(0), 1}, t, torch::kLong);
      auto mask = torch::ones({kIds.size(0), t + 1}, torch::kLong);
      steps.push_back(model->forward(ids, positions, mask, &cache));
    }
    const double diff = (torch::cat(steps, 1) - adapted).abs().max().item<double>();
    INFO("cached, fused decoding against the full forward: " << diff);
    CHECK(diff < 1e-4);
  }
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
