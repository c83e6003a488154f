// Hostile input, LoRA and PEFT, through the real binary: every way an adapter could be silently misapplied is either
// applied as PEFT applies it or refused with one `error:` line naming the file, key or flag, and nothing already
// written changes. `ppo eval` and `ppo generate` read model.lora_path; a LoRA checkpoint records its settings and the
// identity of its base; PEFT settings ppo.cpp does not implement are named; LoRA's dropout stays out of the no-grad
// phases; ranks and target modules are checked whole.
#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/files.h"
#include "common/jsonl.h"
#include "model/lora.h"
#include "model/transformer.h"
#include "tests/app/run_ppo.h"
#include "tests/model/hf_folder.h"
#include "tests/paths.h"
#include "tests/same_runs.h"
#include "tests/temp_dir.h"
#include "tests/text_file.h"

namespace fs = std::filesystem;
using nlohmann::json;
using ppo_test::check_one_error;
using ppo_test::read_text;
using ppo_test::run_ppo;
using ppo_test::TempDir;
using ppo_test::write_text;

namespace {

const std::string& kTiny = ppo_test::kTinyOneThread;
constexpr int kLimit = 120;  // seconds: a hang is killed and fails
// Rank 4 with a random B (init_lora_weights=false): the adapters change the model from the first step.
const std::string kLora = "actor.lora.rank=4 actor.lora.alpha=8 actor.lora.init_lora_weights=false ";

// The table `ppo eval` prints: the lines after its "eval of ..." line (which names the model).
std::string table_of(const std::string& output) {
  const size_t at = output.find("\neval of ");
  if (at == std::string::npos) return "";
  const size_t end = output.find('\n', at + 1);
  return end == std::string::npos ? "" : output.substr(end + 1);
}

// Every file under `dir` with its contents: what "nothing already written changed" compares.
std::map<std::string, std::string> files_under(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file()) files[entry.path().string()] = read_text(entry.path());
  return files;
}

}  // namespace

TEST_CASE("hostile LoRA: ppo eval and ppo generate read model.lora_path, as the adapters' own checkpoint does",
          "[cpu][lora][reliability]") {
  TempDir tmp;
  const std::string run = tmp.sub("run"), adapter = tmp.sub("adapter");
  ppo_test::Run trained = ppo_test::train(0, run, kLora);
  INFO(trained.output);
  REQUIRE(trained.status == 0);
  const std::string checkpoint = run + "/checkpoints/global_step_3";
  REQUIRE(run_ppo("export --checkpoint " + checkpoint + " --lora adapter --out " + adapter, kLimit).status == 0);

  const auto base = run_ppo("eval " + kTiny, kLimit);
  const auto with_path = run_ppo("eval " + kTiny + kLora + "model.lora_path=" + adapter, kLimit);
  const auto with_checkpoint = run_ppo("eval " + kTiny + kLora + "--checkpoint " + checkpoint, kLimit);
  INFO(base.output << with_path.output << with_checkpoint.output);
  REQUIRE(base.status == 0);
  REQUIRE(with_path.status == 0);
  REQUIRE(with_checkpoint.status == 0);
  REQUIRE_FALSE(table_of(base.output).empty());
  CHECK(table_of(with_path.output) != table_of(base.output));
  CHECK(table_of(with_path.output) == table_of(with_checkpoint.output));

  const std::string generate = "generate " + kTiny + "--count 8 --jsonl ";
  const auto plain = run_ppo(generate, kLimit);
  const auto adapted = run_ppo(generate + kLora + "model.lora_path=" + adapter, kLimit);
  const auto from_checkpoint = run_ppo(generate + kLora + "actor.init_checkpoint=" + checkpoint, kLimit);
  REQUIRE(plain.status == 0);
  REQUIRE(adapted.status == 0);
  REQUIRE(from_checkpoint.status == 0);
  CHECK(adapted.output != plain.output);
  CHECK(adapted.output == from_checkpoint.output);
}

TEST_CASE("hostile LoRA: a checkpoint's adapters load only on the base and with the settings they were trained with",
          "[cpu][lora][reliability]") {
  TempDir tmp;
  const std::string model_a = tmp.sub("model_a"), model_b = tmp.sub("model_b"), run = tmp.sub("run");
  ppo_test::write_hf_model(model_a, nullptr, /*seed=*/1);
  ppo_test::write_hf_model(model_b, nullptr, /*seed=*/2);  // the same shape, other weights
  REQUIRE(ppo_test::train(0, run, kLora + "model.path=" + model_a).status == 0);
  const std::string checkpoint = run + "/checkpoints/global_step_3";
  const auto before = files_under(run);

  // Another base: resumed (model.path may change on resume), evaluated, exported merged.
  const std::string other = "model.path=" + model_b + " ";
  const std::string named = "the adapters were trained on the base model.path " + model_a;
  check_one_error(run_ppo("train " + kTiny + kLora + other + "trainer.output_dir=" + run +
                              " trainer.total_training_steps=4 model.attn_implementation=eager trainer.test_freq=0 "
                              "trainer.val_before_train=false",
                          kLimit),
                  named);
  check_one_error(run_ppo("eval " + kTiny + kLora + other + "--checkpoint " + checkpoint, kLimit), named);
  const auto exported = run_ppo("export --checkpoint " + checkpoint + " --out " + tmp.sub("merged") + " " + other);
  check_one_error(exported, "this run's base is model.path " + model_b);
  CHECK_FALSE(fs::exists(tmp.sub("merged")));
  // Other settings: alpha, target modules, rsLoRA.
  const std::string on_a = "eval " + kTiny + "model.path=" + model_a + " --checkpoint " + checkpoint + " ";
  check_one_error(run_ppo(on_a + "actor.lora.rank=4 actor.lora.alpha=16", kLimit),
                  "actor.lora.alpha is 8.0 there, 16.0 here");
  check_one_error(
      run_ppo(on_a + "actor.lora.rank=4 actor.lora.alpha=8 actor.lora.target_modules=[q_proj,v_proj]", kLimit),
      "actor.lora.target_modules is [");
  check_one_error(run_ppo(on_a + "actor.lora.rank=4 actor.lora.alpha=8 actor.lora.use_rslora=true", kLimit),
                  "actor.lora.use_rslora is false there, true here");
  // The run's own settings and base evaluate; nothing of the run changed.
  const auto own = run_ppo(on_a + "actor.lora.rank=4 actor.lora.alpha=8", kLimit);
  INFO(own.output);
  CHECK(own.status == 0);
  CHECK(files_under(run) == before);
}

TEST_CASE("hostile LoRA: adapters trained on a whole checkpoint's weights are evaluated on that checkpoint",
          "[cpu][lora][reliability]") {
  TempDir tmp;
  const std::string whole = tmp.sub("whole"), run = tmp.sub("run");
  REQUIRE(ppo_test::train(0, whole, "").status == 0);
  const std::string start = whole + "/checkpoints/global_step_3";
  REQUIRE(ppo_test::train(0, run, kLora + "actor.init_checkpoint=" + start).status == 0);
  const std::string checkpoint = run + "/checkpoints/global_step_3";
  // The seeded base would be another model: the recorded checkpoint is read again.
  const auto evaluated = run_ppo("eval " + kTiny + kLora + "--checkpoint " + checkpoint, kLimit);
  INFO(evaluated.output);
  CHECK(evaluated.status == 0);
  // Without it the adapters have no base: named, not evaluated on the seeded one.
  fs::rename(whole, tmp.sub("moved"));
  check_one_error(run_ppo("eval " + kTiny + kLora + "--checkpoint " + checkpoint, kLimit),
                  "the adapters were trained on the base " + start + "/actor.pt");
}

TEST_CASE("hostile LoRA: PEFT settings that change the maths and are not implemented are named, rsLoRA is read",
          "[cpu][lora][reliability]") {
  TempDir tmp;
  const std::string run = tmp.sub("run"), adapter = tmp.sub("adapter");
  REQUIRE(ppo_test::train(0, run, kLora).status == 0);
  REQUIRE(run_ppo("export --checkpoint " + run + "/checkpoints/global_step_3 --lora adapter --out " + adapter).status ==
          0);
  const json original = json::parse(read_text(adapter + "/adapter_config.json"));
  CHECK(original.at("use_rslora") == false);
  const std::string eval = "eval " + kTiny + kLora + "model.lora_path=" + adapter + " ";
  const std::vector<std::pair<std::string, json>> refused = {{"use_dora", true},
                                                             {"modules_to_save", json::array({"lm_head"})},
                                                             {"rank_pattern", json::object({{"q_proj", 8}})},
                                                             {"alpha_pattern", json::object({{"q_proj", 32}})},
                                                             {"fan_in_fan_out", true},
                                                             {"bias", "all"},
                                                             {"layers_to_transform", json::array({0})},
                                                             {"lora_bias", true},
                                                             {"exclude_modules", json::array({"q_proj"})},
                                                             {"trainable_token_indices", json::array({1, 2})},
                                                             {"a_key_of_a_later_peft", 1}};
  for (const auto& [key, value] : refused) {
    json edited = original;
    edited[key] = value;
    write_text(adapter + "/adapter_config.json", edited.dump(2));
    check_one_error(run_ppo(eval, kLimit), adapter + "/adapter_config.json: " + key + " is " + value.dump());
  }
  // Defaults and inert keys read as before.
  json inert = original;
  inert["use_dora"] = false;
  inert["modules_to_save"] = nullptr;
  inert["rank_pattern"] = json::object();
  inert["layers_to_transform"] = nullptr;
  inert["peft_version"] = "0.21.2";
  inert["runtime_config"] = {{"ephemeral_gpu_offload", false}};
  write_text(adapter + "/adapter_config.json", inert.dump(2));
  const auto read = run_ppo(eval, kLimit);
  INFO(read.output);
  CHECK(read.status == 0);
  // rsLoRA scales by alpha / sqrt(r): an rsLoRA adapter needs actor.lora.use_rslora, and then gives other numbers.
  json rslora = original;
  rslora["use_rslora"] = true;
  write_text(adapter + "/adapter_config.json", rslora.dump(2));
  check_one_error(run_ppo(eval, kLimit), "use_rslora is true, actor.lora.use_rslora is false");
  const auto scaled = run_ppo(eval + "actor.lora.use_rslora=true", kLimit);
  INFO(scaled.output);
  CHECK(scaled.status == 0);
  CHECK(table_of(scaled.output) != table_of(read.output));
  // A tensor of a module the adapter config does not name: an adapter that would be dropped.
  write_text(adapter + "/adapter_config.json", original.dump(2));
  auto tensors = ppo::load_safetensors(adapter + "/adapter_model.safetensors");
  tensors["base_model.model.lm_head.lora_A.weight"] = torch::zeros({4, 64});
  ppo::save_safetensors(adapter + "/adapter_model.safetensors", tensors);
  check_one_error(run_ppo(eval, kLimit), "tensor base_model.model.lm_head.lora_A.weight is not an adapter");
}

TEST_CASE("hostile LoRA: dropout stays out of generation, old log-probs and validation", "[cpu][lora][reliability]") {
  TempDir tmp;
  ppo_test::Run r =
      ppo_test::train(0, tmp.sub("run"), kLora + "actor.lora.dropout=0.5 trainer.test_freq=1 actor.use_kl_loss=true");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto lines = ppo::read_jsonl(tmp.sub("run") + "/metrics.jsonl");
  REQUIRE(lines.size() == 3);
  for (const json& line : lines) {
    // The rollout's log-probs and the old log-probs come from the same model in eval mode: equal to rounding.
    INFO(line.dump());
    CHECK(line.at("training/rollout_probs_diff_max").get<double>() < 1e-4);
  }
  // The masks are seeded by trainer.seed, the step and the rank: a resumed run draws the step's masks again.
  const std::string split = tmp.sub("split");
  const std::string dropout = kLora + "actor.lora.dropout=0.5 trainer.test_freq=1 actor.use_kl_loss=true ";
  REQUIRE(ppo_test::train(0, split, dropout + "trainer.total_training_steps=2").status == 0);
  const auto resumed =
      ppo_test::run(ppo_test::paths().ppo_binary + " train " + kTiny + "trainer.output_dir=" + split + " " + dropout +
                    "trainer.total_training_steps=3 trainer.val_before_train=false "
                    "model.attn_implementation=eager");
  INFO(resumed.output);
  REQUIRE(resumed.status == 0);
  const auto split_lines = ppo::read_jsonl(split + "/metrics.jsonl");
  REQUIRE(split_lines.size() == 3);
  for (const auto& [key, value] : lines[2].items())
    if (!ppo_test::skip_key(key)) {
      INFO(key);
      CHECK(split_lines[2].at(key) == value);
    }
  // With gradient checkpointing the recomputed layers draw the forward's dropout masks: the same run.
  ppo_test::Run checkpointed = ppo_test::train(0, tmp.sub("checkpointed"),
                                               kLora +
                                                   "actor.lora.dropout=0.5 trainer.test_freq=1 "
                                                   "actor.use_kl_loss=true model.enable_gradient_checkpointing=true");
  REQUIRE(checkpointed.status == 0);
  const auto again = ppo::read_jsonl(tmp.sub("checkpointed") + "/metrics.jsonl");
  REQUIRE(again.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    INFO("step " << i + 1);
    CHECK(again[i].at("actor/pg_loss") == lines[i].at("actor/pg_loss"));
    CHECK(again[i].at("actor/grad_norm") == lines[i].at("actor/grad_norm"));
  }
}

TEST_CASE("hostile LoRA: target modules are checked whole, and ranks have bounds", "[cpu][lora][reliability]") {
  check_one_error(run_ppo("config actor.lora.rank=4 actor.lora.target_modules=[all-linear,q_prj]", kLimit),
                  "actor.lora.target_modules: the model has no linear layer 'q_prj'");
  check_one_error(run_ppo("config actor.lora.rank=4 actor.lora.target_modules=[q_prj,all-linear]", kLimit),
                  "actor.lora.target_modules: the model has no linear layer 'q_prj'");
  check_one_error(run_ppo("config actor.lora.rank=4611686018427387904", kLimit), "actor.lora.rank=");
  check_one_error(run_ppo("config critic.lora.rank=1000000", kLimit),
                  "critic.lora.rank=1000000 is out of range: 0 (off) to 65536");
  // The tiny model's k_proj is [32, 64]: rank 33 adds parameters and no rank.
  check_one_error(run_ppo("config " + kTiny + "actor.lora.rank=33", kLimit),
                  "actor.lora.rank=33 is above the smaller side of k_proj [32, 64]");
  CHECK(run_ppo("config " + kTiny + "actor.lora.rank=32", kLimit).status == 0);
  // A base that fits this machine's memory with adapters that do not: named before anything is allocated.
  const double available = ppo::available_memory_bytes();
  if (available <= 0) return;
  // Width 8192, MLP 8192, 64 heads of 128 for queries and keys: a layer has 4.7e8 parameters, and rank 8192 adapters
  // on its 7 linears 9.4e8 more. Enough layers that all of it exceeds the memory, while the base alone takes a third.
  const double base_layer = 4.0 * 8192 * 8192 + 3.0 * 8192 * 8192, adapters_layer = 7.0 * 8192 * 16384;
  const int64_t layers = static_cast<int64_t>(available / (4 * (base_layer + adapters_layer))) + 1;
  const std::string shape =
      "model.hidden_size=8192 model.intermediate_size=8192 model.num_heads=64 "
      "model.num_kv_heads=64 model.num_layers=" +
      std::to_string(layers) + " ";
  INFO(layers << " layers, " << available / (1 << 30) << " GiB available");
  REQUIRE(4 * base_layer * static_cast<double>(layers) < available);
  check_one_error(run_ppo("generate " + kTiny + shape + "actor.lora.rank=8192 --count 1", kLimit),
                  "actor.lora.rank=8192: the model has ");
}
