// ppo train with distillation.enable, through the real binary: a teacher equal to the student gives no signal at its
// first step, exactly, in the reward, sampled-token and top-k modes; 2 ranks, ZeRO-3 and rollout ranks compute what 1
// rank does; a teacher of another vocabulary, one whose log-probs are not finite, a folder that is no model, or a
// top-k outside the vocabulary are refused with one error line, nothing written.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "model/safetensors.h"
#include "tests/app/run_ppo.h"
#include "tests/model/tiny_tokenizer.h"
#include "tests/same_runs.h"
#include "tests/temp_dir.h"
#include "tests/text_file.h"

namespace fs = std::filesystem;
using ppo_test::metrics;
using ppo_test::TempDir;
using ppo_test::train;

namespace {

// The teacher: 3 steps of the tiny config, its last checkpoint.
std::string make_teacher(const TempDir& tmp) {
  const std::string dir = tmp.sub("teacher");
  const ppo_test::Run r = train(0, dir, "");
  INFO(r.output);
  REQUIRE(r.status == 0);
  return dir + "/checkpoints/global_step_3";
}

// The keys that turn distillation on with `teacher`, the teacher's forwards in micro-batches of the student's.
std::string distill(const std::string& teacher, const std::string& extra) {
  return "distillation.enable=true distillation.teacher.model.path=" + teacher +
         " distillation.teacher.log_prob_micro_batch_size_per_gpu=16 rollout.log_prob_micro_batch_size_per_gpu=16 " +
         extra;
}

}  // namespace

TEST_CASE("distillation: a teacher equal to the student gives no signal at the first step", "[cpu][distill_cli]") {
  TempDir tmp;
  const std::string teacher = make_teacher(tmp);
  // The top-k modes padded and packed (the tiny config packs).
  for (const std::string mode :
       {"reverse_kl_reward", "k3", "jsd_topk", "forward_kl_topk actor.use_remove_padding=false"}) {
    INFO(mode);
    const std::string dir = tmp.sub("same_" + mode.substr(0, mode.find(' ')));
    const ppo_test::Run r = train(0, dir,
                                  distill(teacher, "actor.init_checkpoint=" + teacher + " distillation.topk=8 " +
                                                       "distillation.loss_mode=" + mode));
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK_THAT(r.output, Catch::Contains("teacher: " + teacher));
    CHECK_THAT(r.output, Catch::Contains("| teacher kl 0.0000 agree 1.000"));  // step 1's line
    const auto m = metrics(dir);
    CHECK(m[0]["distill/reverse_kl"].get<double>() == 0.0);
    CHECK(m[0]["distill/argmax_agreement"].get<double>() == 1.0);
    CHECK(m[0]["distill/teacher_log_prob"].get<double>() < 0.0);
    CHECK(m[0]["timing_s/teacher"].get<double>() > 0.0);
    if (mode == "reverse_kl_reward") {
      CHECK(m[0]["critic/rewards/mean"].get<double>() == 0.0);  // the KL reward alone: zero
      continue;
    }
    // Packed, the update's forward of a row is the teacher phase's to the bit; padded, its micro-batches are cut to
    // other widths than the teacher phase's, which changes the rounding of the padded attention.
    const bool packed = mode.find("use_remove_padding=false") == std::string::npos;
    const double rounding = packed ? 0 : 1e-6;
    CHECK(m[0]["actor/distill_loss"].get<double>() <= rounding);
    if (mode == "k3") continue;
    // The teacher's 8 tokens hold more than 8 of 99 would at random, the student's (the same model, which the zero
    // loss leaves unchanged through the step's mini-batches) as much.
    const double mass = m[0]["distill/teacher_topk_mass"].get<double>();
    CHECK(mass > 8.0 / 99);
    CHECK(mass <= 1.0);
    CHECK(std::abs(m[0]["actor/distill_student_topk_mass"].get<double>() - mass) <= 1e-6 + 10 * rounding);
  }
  // A fresh student differs from the teacher: a positive KL, and the reward mode's rewards are its negative, summed
  // over each response's tokens. GAE at gamma 1 credits each token with the later tokens' KL too: a note says so, and
  // none at gamma 0.
  const std::string fresh = tmp.sub("fresh");
  const ppo_test::Run summed = train(0, fresh, distill(teacher, ""));
  REQUIRE(summed.status == 0);
  CHECK_THAT(summed.output, Catch::Contains("note: distillation.loss_mode=reverse_kl_reward with "
                                            "algorithm.adv_estimator=gae and algorithm.gamma=1 credits each token"));
  const ppo_test::Run own = train(0, tmp.sub("gamma0"), distill(teacher, "algorithm.gamma=0"));
  REQUIRE(own.status == 0);
  CHECK_THAT(own.output, !Catch::Contains("note: distillation.loss_mode"));
  const auto m = metrics(fresh);
  CHECK(m[0]["distill/reverse_kl"].get<double>() > 0.0);
  CHECK(m[0]["critic/rewards/mean"].get<double>() < 0.0);
}

TEST_CASE("distillation: a LoRA run's checkpoint teaches as its model, and an offloaded teacher as a resident one",
          "[cpu][distill_cli]") {
  TempDir tmp;
  // The LoRA teacher: its base and adapters, its LoRA settings from its run's config.yaml. The student starts from the
  // same checkpoint with the same settings, so the two models are one.
  const std::string lora = "actor.lora.rank=4 actor.lora.alpha=8 ";
  REQUIRE(train(0, tmp.sub("lora_teacher"), lora).status == 0);
  const std::string teacher = tmp.sub("lora_teacher") + "/checkpoints/global_step_3";
  const std::string dir = tmp.sub("lora_student");
  const ppo_test::Run r = train(0, dir, distill(teacher, lora + "actor.init_checkpoint=" + teacher));
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto m = metrics(dir);
  CHECK(m[0]["distill/reverse_kl"].get<double>() == 0.0);
  CHECK(m[0]["distill/argmax_agreement"].get<double>() == 1.0);
  // distillation.teacher.offload.param: the same run, to the bit.
  const std::string loss = "distillation.loss_mode=jsd_topk distillation.topk=8 distillation.use_policy_loss=true";
  REQUIRE(train(0, tmp.sub("resident"), distill(make_teacher(tmp), loss)).status == 0);
  REQUIRE(train(0, tmp.sub("offloaded"),
                distill(tmp.sub("teacher") + "/checkpoints/global_step_3",
                        loss + " distillation.teacher.offload.param=true"))
              .status == 0);
  ppo_test::check_same(tmp.sub("resident"), tmp.sub("offloaded"), 0, 1e-12, 0, 0);
}

TEST_CASE("distillation: 2 ranks, ZeRO-3 and rollout ranks equal 1 rank", "[mpi][distill_cli]") {
  TempDir tmp;
  const std::string teacher = make_teacher(tmp);
  // The top-k loss: the teacher's [B, R, k] fields go through the micro-batches and packing of every layout.
  const std::string loss =
      distill(teacher, "distillation.loss_mode=jsd_topk distillation.topk=8 distillation.use_policy_loss=true");
  REQUIRE(train(0, tmp.sub("one"), loss).status == 0);
  for (const std::string extra : {"", "parallel.zero_stage=3"}) {
    INFO(extra);
    const std::string dir = tmp.sub("two" + extra);
    const ppo_test::Run r = train(2, dir, loss + " " + extra);
    INFO(r.output);
    REQUIRE(r.status == 0);
    ppo_test::check_same(tmp.sub("one"), dir, ppo_test::kRankTolerance);
  }
  // The reward mode with a rollout rank: the teacher runs on the trainer.
  ppo_test::check_roles_equal(tmp.sub("roles"), distill(teacher, "trainer.test_freq=3"), {{2, 1}});
}

TEST_CASE("distillation: bad teachers and keys are refused with one error line, nothing written",
          "[cpu][distill_cli]") {
  TempDir tmp;
  const std::string teacher = make_teacher(tmp);
  const std::string hf = tmp.sub("teacher_hf");
  REQUIRE(ppo_test::run_ppo("export --checkpoint " + teacher + " --out " + hf).status == 0);
  // The same model with a byte-level tokenizer.json beside it: another vocabulary.
  const std::string other = tmp.sub("other_vocab");
  fs::create_directories(other);
  for (const auto& entry : fs::directory_iterator(hf)) fs::copy_file(entry.path(), other / entry.path().filename());
  ppo_test::write_text(fs::path(other) / "tokenizer.json", ppo_test::tiny_tokenizer_json().dump());
  // The same model with a NaN weight.
  const std::string broken = tmp.sub("nan_teacher");
  fs::create_directories(broken);
  for (const auto& entry : fs::directory_iterator(hf)) fs::copy_file(entry.path(), broken / entry.path().filename());
  std::map<std::string, torch::Tensor> weights = ppo::load_safetensors(broken + "/model.safetensors");
  weights.at("model.norm.weight").fill_(std::nan(""));
  ppo::save_safetensors(broken + "/model.safetensors", weights);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"distillation.enable=true", "distillation.teacher.model.path"},
      {distill(tmp.sub("nowhere"), ""), "is neither a Hugging Face folder"},
      {distill(hf, "distillation.loss_mode=forward_kl"), "distillation.loss_mode"},
      {distill(other, ""), "the vocabularies differ in size"},
      {distill(broken, ""), "non-finite"},
      {"distillation.teacher.model.path=" + hf, "distillation.enable"},
      {distill(hf, "distillation.distillation_loss_coef=0"), "distillation.distillation_loss_coef"},
      {distill(hf, "distillation.loss_mode=jsd_topk distillation.topk=0"), "distillation.topk"},
      {distill(hf, "distillation.loss_mode=forward_kl_topk distillation.topk=100000"),
       "distillation.topk=100000 is more tokens than the"},
      {distill(hf, "distillation.loss_mode=jsd_topk distillation.jsd_beta=1"), "distillation.jsd_beta"},
  };
  int i = 0;
  for (const auto& [keys, expected] : cases) {
    INFO("case " << i);
    const std::string dir = tmp.sub("bad" + std::to_string(i++));
    const ppo_test::Run r = train(0, dir, keys);
    ppo_test::check_one_error({r.status, r.output}, expected);
    CHECK_FALSE(fs::exists(dir + "/metrics.jsonl"));
  }
  // The error names both tokenizers.
  const ppo_test::Run r = train(0, tmp.sub("names"), distill(other, ""));
  CHECK_THAT(r.output, Catch::Contains(other) && Catch::Contains("the student's tokenizer char"));
}
