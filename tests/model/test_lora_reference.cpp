// PEFT as the oracle for ppo.cpp's LoRA ([ref]): a random Qwen2-shaped model made by transformers and a random PEFT
// adapter on every linear layer (on MoE models: the attention and the stacked experts), read by ppo.cpp (model.path
// + model.lora_path), give PEFT's logits; ppo.cpp's PEFT export loads in PEFT and gives them again; PEFT's
// merge_and_unload equals ppo.cpp's merged weights.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>

#include "model/hf.h"
#include "model/lora.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "tests/reference/reference.h"
#include "tests/temp_dir.h"

namespace {

torch::Tensor logits_of(ppo::CausalLM& model, const torch::Tensor& ids) {
  torch::NoGradGuard no_grad;
  model->eval();
  return model->forward(ids, torch::arange(ids.size(1)).unsqueeze(0).expand_as(ids).contiguous());
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat) - b.to(torch::kFloat)).abs().max().item<double>();
}

// The shape of the Hugging Face model in `model_dir`.
ppo::ModelConfig config_of(const std::string& model_dir) {
  ppo::ModelConfig config;
  config.path = model_dir;
  ppo::resolve_model_path(config);
  return config;
}

// The adapters peft_lora.py makes: rank 4, alpha 8, every linear layer.
ppo::LoraConfig peft_lora() {
  ppo::LoraConfig lora;
  lora.rank = 4;
  lora.alpha = 8;
  return lora;
}

// The Hugging Face model in `model_dir` with fresh adapters of `lora` (rank 4, alpha 8 unless changed).
ppo::CausalLM adapted_model(const ppo::ModelConfig& config, const std::string& model_dir, const ppo::LoraConfig& lora) {
  ppo::CausalLM model(config, config.vocab_size);
  ppo::load_hf_weights(*model, model_dir, /*allow_missing_value_head=*/false);
  ppo::add_lora(*model->model, lora, "actor.lora", config.seed);
  return model;
}

// Token ids [rows, cols] from a fixed seed: LibTorch seeds its default generator anew in every process, and the
// differences below varied from 4e-6 to 1.1e-4 over random inputs.
torch::Tensor fixed_ids(int64_t vocab, int64_t rows, int64_t cols, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(1, vocab, {rows, cols}, torch::kLong);
}

// How close ppo.cpp's logits must come to PEFT's `ref`: float32 rounding grows with the logits' size, so relative to
// the largest (as the SmolLM2 oracle's log-probs).
double logit_tolerance(const torch::Tensor& ref) {
  return 1e-4 * std::max(1.0, ref.abs().max().item<double>());
}

// Writes {"ids": [[...], ...]} of `ids` [B, T] to `path`, the inputs peft_lora.py reads.
void write_inputs(const torch::Tensor& ids, const std::string& path) {
  std::vector<std::vector<int64_t>> rows;
  for (int64_t b = 0; b < ids.size(0); ++b) {
    rows.emplace_back();
    for (int64_t t = 0; t < ids.size(1); ++t) rows.back().push_back(ids[b][t].item<int64_t>());
  }
  std::ofstream(path) << nlohmann::json{{"ids", rows}}.dump();
}

}  // namespace

namespace {

// A random PEFT adapter on every linear layer of a random model of `kind` (hf_models.py's kinds) read by ppo.cpp
// gives PEFT's logits, adapted and with the adapters off; ppo.cpp's adapter files give them in PEFT; merging equals
// merge_and_unload tensor for tensor. With `experts`, the adapter sits on an MoE model's attention and its stacked
// experts (PEFT's target_parameters).
void check_peft_oracle(const std::string& kind, bool experts = false) {
  INFO("model kind " << kind << (experts ? ", adapters on the experts" : ""));
  ppo_test::TempDir tmp;
  const std::string model_dir = tmp.sub("model"), adapter_dir = tmp.sub("adapter"), ours = tmp.sub("ours");
  ppo_test::run_reference("hf_models.py", "make " + kind + " " + model_dir);
  ppo_test::run_reference("peft_lora.py", "make " + model_dir + " " + adapter_dir + (experts ? " experts" : ""));

  const ppo::ModelConfig config = config_of(model_dir);
  ppo::LoraConfig lora = peft_lora();
  if (experts) {
    lora.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj"};
    lora.target_parameters = {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"};
  }
  ppo::CausalLM model = adapted_model(config, model_dir, lora);
  ppo::load_peft_adapter(*model, lora, adapter_dir);

  const torch::Tensor ids = fixed_ids(config.vocab_size, 3, 12, 3);
  const std::string inputs = tmp.sub("inputs.json");
  write_inputs(ids, inputs);
  ppo_test::run_reference("peft_lora.py",
                          "run " + model_dir + " " + adapter_dir + " " + inputs + " " + tmp.sub("peft.safetensors"));
  const auto peft = ppo::load_safetensors(tmp.sub("peft.safetensors"));
  const double tolerance = logit_tolerance(peft.at("logits"));

  const torch::Tensor logits = logits_of(model, ids);
  const double adapted = max_diff(logits, peft.at("logits")),
               moved = max_diff(peft.at("logits"), peft.at("base_logits"));
  double base = 0;
  {
    ppo::LoraDisabled off(*model->model);
    base = max_diff(logits_of(model, ids), peft.at("base_logits"));
  }
  WARN(kind << ": ppo.cpp against PEFT, max |logit difference|: adapted " << adapted << ", adapters off " << base
            << " (the adapter moves PEFT's logits by " << moved << ")");
  CHECK(moved > 0.1);
  CHECK(adapted < tolerance);
  CHECK(base < tolerance);

  // ppo.cpp's PEFT files load in PEFT and give the same logits.
  ppo::save_peft_adapter(*model, lora, ours, model_dir);
  ppo_test::run_reference("peft_lora.py",
                          "run " + model_dir + " " + ours + " " + inputs + " " + tmp.sub("peft_ours.safetensors"));
  const auto peft_ours = ppo::load_safetensors(tmp.sub("peft_ours.safetensors"));
  CHECK(max_diff(peft_ours.at("logits"), logits) < tolerance);

  // merge_and_unload against ppo.cpp's merge, tensor for tensor.
  ppo::merge_lora(*model->model);
  CHECK(max_diff(logits_of(model, ids), peft.at("logits")) < tolerance);
  size_t compared = 0;
  double worst = 0;
  for (const auto& item : model->named_parameters()) {
    if (ppo::is_lora_parameter(item.key())) continue;
    INFO(item.key());
    REQUIRE(peft.count("merged." + item.key()) == 1);
    worst = std::max(worst, max_diff(item.value(), peft.at("merged." + item.key())));
    ++compared;
  }
  WARN(kind << ": merged weights: " << compared << " tensors, max |difference| " << worst);
  CHECK(compared > 20);
  CHECK(worst < 1e-5);
}

}  // namespace

TEST_CASE("PEFT oracle: a random adapter on every linear layer of a random Qwen2 gives PEFT's logits, both ways",
          "[cpu][lora][ref]") {
  check_peft_oracle("qwen2");
}

// Qwen3's q_proj is wider than its input (heads twice hidden / heads wide) and its q/k norms are not adapted.
TEST_CASE("PEFT oracle: the same on a random Qwen3 (q/k norms, wide heads)", "[cpu][lora][ref]") {
  check_peft_oracle("qwen3");
}

// transformers 5 holds an MoE layer's experts stacked; PEFT adapts them as parameters (ParamWrapper: one A and B of
// rank r E per weight, nested where both are targeted). Qwen3-MoE's second layer is dense, Mixtral's are all MoE.
TEST_CASE(
    "PEFT oracle: adapters on the stacked experts of a random Qwen3-MoE and Mixtral give PEFT's logits, both ways",
    "[cpu][lora][moe][ref]") {
  check_peft_oracle("qwen3-moe", /*experts=*/true);
  check_peft_oracle("mixtral", /*experts=*/true);
}

TEST_CASE("PEFT oracle: an rsLoRA adapter (alpha / sqrt(r)) gives PEFT's logits, both ways", "[cpu][lora][ref]") {
  ppo_test::TempDir tmp;
  const std::string model_dir = tmp.sub("model"), adapter_dir = tmp.sub("adapter"), ours = tmp.sub("ours");
  ppo_test::run_reference("hf_models.py", "make qwen2 " + model_dir);
  ppo_test::run_reference("peft_lora.py", "make " + model_dir + " " + adapter_dir + " rslora");

  const ppo::ModelConfig config = config_of(model_dir);
  ppo::LoraConfig lora = peft_lora();
  ppo::CausalLM model = adapted_model(config, model_dir, lora);
  // Read as plain LoRA it would be scaled by alpha / r, half of rsLoRA's alpha / sqrt(r) at r = 4: refused.
  CHECK_THROWS_WITH(ppo::load_peft_adapter(*model, lora, adapter_dir),
                    Catch::Contains("use_rslora is true, actor.lora.use_rslora is false"));
  lora.use_rslora = true;
  ppo::CausalLM rs = adapted_model(config, model_dir, lora);
  ppo::load_peft_adapter(*rs, lora, adapter_dir);

  const torch::Tensor ids = fixed_ids(config.vocab_size, 2, 10, 2);
  write_inputs(ids, tmp.sub("inputs.json"));
  ppo_test::run_reference("peft_lora.py", "run " + model_dir + " " + adapter_dir + " " + tmp.sub("inputs.json") + " " +
                                              tmp.sub("peft.safetensors"));
  const auto peft = ppo::load_safetensors(tmp.sub("peft.safetensors"));
  const double adapted = max_diff(logits_of(rs, ids), peft.at("logits")),
               tolerance = logit_tolerance(peft.at("logits"));
  WARN("rsLoRA against PEFT, max |logit difference| " << adapted << " (tolerance " << tolerance << ")");
  CHECK(adapted < tolerance);
  // ppo.cpp's files say use_rslora, and PEFT reads them back to the same logits.
  ppo::save_peft_adapter(*rs, lora, ours, model_dir);
  ppo_test::run_reference("peft_lora.py", "run " + model_dir + " " + ours + " " + tmp.sub("inputs.json") + " " +
                                              tmp.sub("peft_ours.safetensors"));
  CHECK(max_diff(ppo::load_safetensors(tmp.sub("peft_ours.safetensors")).at("logits"), logits_of(rs, ids)) < tolerance);
  // Merged, the rsLoRA scale is folded in.
  ppo::merge_lora(*rs->model);
  CHECK(max_diff(logits_of(rs, ids), peft.at("logits")) < tolerance);
}
