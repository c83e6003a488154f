// LoRA in real runs (`ppo train`, `ppo export`): only the adapters train and are saved, the reference is the base
// with its adapters off, N ranks equal 1 rank, resume is exact, export folds the adapters in, and bad input.
#include <catch2/catch.hpp>
#include <filesystem>

#include "common/config.h"
#include "model/hf.h"
#include "model/lora.h"
#include "model/safetensors.h"
#include "tests/app/run_ppo.h"
#include "tests/paths.h"
#include "tests/same_runs.h"
#include "tests/temp_dir.h"
#include "train/config_check.h"
#include "workers/actor.h"

namespace fs = std::filesystem;

namespace {

// Rank 4 on every linear layer; the KL loss, so the step has a reference; micro-batches of 4.
const std::string kLora =
    "actor.lora.rank=4 actor.lora.alpha=8 actor.use_kl_loss=true actor.ppo_micro_batch_size_per_gpu=4 "
    "critic.ppo_micro_batch_size_per_gpu=4 ";

ppo::Config tiny_config(const std::vector<std::string>& overrides) {
  ppo::Config c = ppo::load_config({ppo_test::paths().source_dir + "/configs/regression_tiny.yaml"}, overrides);
  ppo::check_config(c, 1);
  return c;
}

}  // namespace

TEST_CASE("a LoRA actor's reference log-probs are its base's, whatever its adapters hold", "[cpu][lora]") {
  const ppo::Config lora = tiny_config({"actor.lora.rank=4", "actor.lora.init_lora_weights=false"});
  const ppo::Config plain = tiny_config({});
  auto actor = ppo::Actor::policy(lora, 99, /*total_optimizer_steps=*/10);
  auto base = ppo::Actor::reference(plain, 99);
  REQUIRE(actor->has_lora());
  // A batch of 4 sequences: prompt of 3 tokens, response of 4.
  ppo::Batch batch;
  const torch::Tensor ids = torch::randint(3, 90, {4, 7}, torch::kLong);
  batch.set(ppo::field::input_ids, ids);
  batch.set(ppo::field::attention_mask, torch::ones({4, 7}, torch::kLong));
  batch.set(ppo::field::position_ids, torch::arange(7).unsqueeze(0).expand({4, 7}).contiguous());
  batch.set(ppo::field::responses, ids.slice(1, 3, 7).contiguous());
  const ppo::MicroBatchSpec micro{2, 0, ""};
  const torch::Tensor reference = actor->compute_base_log_probs(batch, micro);
  CHECK(torch::equal(reference, base->compute_log_probs(batch, micro)));
  // The adapted policy differs (B is random here), and only the adapters require gradients.
  CHECK_FALSE(torch::allclose(actor->compute_log_probs(batch, micro), reference));
  int64_t trained = 0;
  for (const auto& item : actor->model()->named_parameters()) {
    INFO(item.key());
    CHECK(item.value().requires_grad() == ppo::is_lora_parameter(item.key()));
    trained += item.value().requires_grad() ? item.value().numel() : 0;
  }
  CHECK(trained == actor->state().trained_count());
  CHECK(trained < actor->state().parameter_count() / 2);
}

TEST_CASE("a LoRA run trains and saves only the adapters, and resumes exactly", "[cpu][lora]") {
  ppo_test::TempDir tmp;
  const std::string whole = tmp.sub("whole"), split = tmp.sub("split");
  ppo_test::Run r = ppo_test::train(0, whole, kLora + "trainer.total_training_steps=4 trainer.save_freq=2");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("(LoRA rank 4: ") && Catch::Contains("the reference is the base"));
  const std::string checkpoint = whole + "/checkpoints/global_step_2";
  CHECK(fs::exists(checkpoint + "/actor_lora.safetensors"));
  CHECK_FALSE(fs::exists(checkpoint + "/actor.pt"));
  const auto adapters = ppo::load_safetensors(checkpoint + "/actor_lora.safetensors");
  for (const auto& [name, tensor] : adapters) CHECK(ppo::is_lora_parameter(name));
  CHECK(adapters.size() == 2 * 7 * 2);  // 7 linears per layer, A and B, 2 layers
  // No reference model: the step still has its ref phase, on the actor's base.
  const auto lines = ppo_test::metrics(whole);
  CHECK(lines.front().contains("timing_s/ref"));

  // 2 steps, then resumed to 4: every metric of steps 3 and 4 bit for bit.
  REQUIRE(ppo_test::train(0, split, kLora + "trainer.total_training_steps=2 trainer.save_freq=2").status == 0);
  ppo_test::Run resumed = ppo_test::train(0, split + "_2",
                                          kLora +
                                              "trainer.total_training_steps=4 "
                                              "trainer.save_freq=2 trainer.resume_mode=" +
                                              split + "/checkpoints/global_step_2");
  INFO(resumed.output);
  REQUIRE(resumed.status == 0);
  const auto a = ppo_test::metrics(whole), b = ppo_test::metrics(split + "_2");
  REQUIRE(b.size() == 2);
  for (size_t i = 0; i < 2; ++i)
    for (auto& [key, value] : a[i + 2].items()) {
      if (ppo_test::skip_key(key)) continue;
      INFO("step " << i + 3 << " " << key);
      CHECK(b[i].at(key) == value);
    }
}

TEST_CASE("LoRA on 2 ranks equals 1 rank, unsharded and at ZeRO stage 3", "[mpi][lora]") {
  ppo_test::TempDir tmp;
  REQUIRE(ppo_test::train(0, tmp.sub("one"), kLora).status == 0);
  for (const std::string zero : {"", " parallel.zero_stage=3"}) {
    const std::string dir = tmp.sub("two" + std::to_string(zero.size()));
    ppo_test::Run r = ppo_test::train(2, dir, kLora + zero);
    INFO(zero << "\n" << r.output);
    REQUIRE(r.status == 0);
    ppo_test::check_same(tmp.sub("one"), dir, ppo_test::kRankTolerance);
  }
}

TEST_CASE("LoRA on a Mixtral-shaped policy's experts trains them, and 2 ranks at ZeRO stage 3 equal 1 rank",
          "[mpi][lora][moe]") {
  ppo_test::TempDir tmp;
  // 4 experts, top-2, with routing replay; GRPO, as a critic's MoE backbone routes by itself.
  const std::string moe =
      kLora +
      "model.model_type=mixtral model.moe.num_experts=4 model.moe.num_experts_per_tok=2 "
      "actor.router_replay=R3 algorithm.adv_estimator=grpo actor.lora.target_modules=[q_proj,v_proj] "
      "actor.lora.target_parameters=[mlp.experts.gate_up_proj,mlp.experts.down_proj] ";
  ppo_test::Run one = ppo_test::train(0, tmp.sub("one"), moe);
  INFO(one.output);
  REQUIRE(one.status == 0);
  // B starts at zero: the experts' adapters moved away from it.
  const auto saved = ppo::load_safetensors(tmp.sub("one") + "/checkpoints/global_step_3/actor_lora.safetensors");
  int64_t expert_b = 0;
  for (const auto& [name, t] : saved)
    if (name.find(".experts.") != std::string::npos && name.find("lora_B") != std::string::npos) {
      INFO(name);
      CHECK(t.abs().max().item<double>() > 0);
      ++expert_b;
    }
  CHECK(expert_b == 2 * 2);  // both weights of both layers
  ppo_test::Run two = ppo_test::train(2, tmp.sub("two"), moe + "parallel.zero_stage=3");
  INFO(two.output);
  REQUIRE(two.status == 0);
  ppo_test::check_same(tmp.sub("one"), tmp.sub("two"), ppo_test::kRankTolerance);
}

TEST_CASE("ppo export --lora merged folds the adapters in, and --lora adapter writes PEFT files", "[cpu][lora]") {
  ppo_test::TempDir tmp;
  const std::string run = tmp.sub("run");
  REQUIRE(ppo_test::train(0, run, kLora).status == 0);
  const std::string checkpoint = run + "/checkpoints/global_step_3";
  const auto merged = ppo_test::run_ppo("export --checkpoint " + checkpoint + " --out " + tmp.sub("merged"));
  INFO(merged.output);
  REQUIRE(merged.status == 0);
  const auto adapter =
      ppo_test::run_ppo("export --checkpoint " + checkpoint + " --lora adapter --out " + tmp.sub("adapter"));
  INFO(adapter.output);
  REQUIRE(adapter.status == 0);
  CHECK(fs::exists(tmp.sub("adapter") + "/adapter_config.json"));
  // The merged folder's weights are base + (alpha / rank) B A: the LoRA model and the merged one give the same
  // logits.
  const ppo::Config c = tiny_config({"actor.lora.rank=4", "actor.lora.alpha=8", "actor.init_checkpoint=" + checkpoint});
  auto actor = ppo::Actor::reference(c, 99);
  ppo::CausalLM plain(c.model, 99);
  ppo::load_hf_weights(*plain, tmp.sub("merged"), /*allow_missing_value_head=*/false);
  const torch::Tensor ids = torch::randint(3, 90, {2, 9}, torch::kLong);
  const torch::Tensor positions = torch::arange(9).unsqueeze(0).expand({2, 9}).contiguous();
  torch::NoGradGuard no_grad;
  actor->model()->eval();
  plain->eval();
  const double diff =
      (actor->model()->forward(ids, positions) - plain->forward(ids, positions)).abs().max().item<double>();
  INFO("merged against adapted logits: " << diff);
  CHECK(diff < 1e-4);
  CHECK(diff > 0);  // the adapters were trained: not the base
  // The PEFT folder read back into a LoRA model gives the adapted logits exactly.
  ppo::CausalLM reread(c.model, 99);  // the seeded base, as the run's
  ppo::add_lora(*reread->model, c.actor.lora, "actor.lora", c.model.seed);
  ppo::load_peft_adapter(*reread, c.actor.lora, tmp.sub("adapter"));
  const auto peft = ppo::peft_adapter_tensors(*reread), ours = ppo::peft_adapter_tensors(*actor->model());
  REQUIRE(peft.size() == ours.size());
  for (const auto& [name, t] : ours) CHECK(torch::equal(peft.at(name), t));
}

TEST_CASE("LoRA's bad input: a missing module, rank < 0, resuming a checkpoint saved without LoRA", "[cpu][lora]") {
  ppo_test::TempDir tmp;
  ppo_test::check_one_error(ppo_test::run_ppo("train --config " + ppo_test::paths().source_dir +
                                              "/configs/regression_tiny.yaml actor.lora.rank=4 "
                                              "actor.lora.target_modules=[q_proj,qkv_proj] trainer.output_dir=" +
                                              tmp.sub("a")),
                            "actor.lora.target_modules: the model has no linear layer 'qkv_proj'");
  ppo_test::check_one_error(
      ppo_test::run_ppo("train --config " + ppo_test::paths().source_dir +
                        "/configs/regression_tiny.yaml critic.lora.rank=-2 trainer.output_dir=" + tmp.sub("b")),
      "critic.lora.rank=-2 is out of range: 0 (off) to 65536");
  ppo_test::check_one_error(ppo_test::run_ppo("train --config " + ppo_test::paths().source_dir +
                                              "/configs/regression_tiny.yaml model.lora_path=" + tmp.sub("peft") +
                                              " trainer.output_dir=" + tmp.sub("c")),
                            "model.lora_path=" + tmp.sub("peft") + " needs actor.lora.rank > 0");
  const std::string plain = tmp.sub("plain");
  REQUIRE(ppo_test::train(0, plain, "trainer.total_training_steps=1").status == 0);
  ppo_test::check_one_error(
      ppo_test::run_ppo("train --config " + ppo_test::paths().source_dir +
                        "/configs/regression_tiny.yaml actor.lora.rank=4 "
                        "trainer.resume_allow_config_change=true trainer.total_training_steps=2 trainer.output_dir=" +
                        plain),
      "was saved without actor.lora");
}
