// ppo rm (train/rm.h): preference pairs in TRL's and OpenRLHF's layouts, the Bradley-Terry loss against a PyTorch loop
// on transformers' classifier, the export transformers reads to the same scores, held-out accuracy rising, exact
// resume, N ranks == 1 rank, and the critic started from a reward model or an SFT checkpoint.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/files.h"
#include "common/jsonl.h"
#include "common/manifest.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "tasks/parquet.h"
#include "tasks/preference_pairs.h"
#include "tests/app/run_ppo.h"
#include "tests/model/hf_folder.h"
#include "tests/paths.h"
#include "tests/reference/reference.h"
#include "tests/same_runs.h"
#include "tests/temp_dir.h"
#include "tests/usage_error.h"
#include "text/tokenizers.h"
#include "train/config_check.h"
#include "train/prompts.h"
#include "train/rm.h"
#include "workers/actor.h"
#include "workers/critic.h"

using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

void write_lines(const std::string& path, const std::vector<json>& records) {
  std::ofstream out(path);
  for (const json& r : records) out << r.dump() << "\n";
}

json message(const std::string& role, const std::string& content) {
  return {{"role", role}, {"content", content}};
}

// Pairs a tiny model can learn: after "a>" the response of a's is preferred, after "b>" the one of b's; lengths vary.
std::vector<json> letter_pairs(int64_t count, int64_t seed) {
  std::vector<json> out;
  for (int64_t i = 0; i < count; ++i) {
    const bool a = (i + seed) % 2 == 0;
    const std::string as(static_cast<size_t>(1 + (i * 7 + seed) % 4), 'a'),
        bs(static_cast<size_t>(1 + (i * 5 + seed * 3) % 4), 'b');
    out.push_back({{"prompt", std::string(a ? "a" : "b") + std::to_string(i % 10) + ">"},
                   {"chosen", a ? as : bs},
                   {"rejected", a ? bs : as}});
  }
  return out;
}

// `ppo rm` of the tiny shape (configs/regression_tiny.yaml's model) on the char tokenizer.
std::string rm_command(const std::string& dir, const std::string& train, const std::string& val,
                       const std::string& extra) {
  return "rm " + ppo_test::kTinyOneThread + "trainer.output_dir=" + dir + " data.train_files=[" + train +
         "] data.val_files=[" + val +
         "] data.train_batch_size=4 critic.ppo_mini_batch_size=4 critic.ppo_micro_batch_size_per_gpu=4 "
         "data.max_prompt_length=8 data.max_response_length=8 model.attn_implementation=eager " +
         extra;
}

// The tiny config's value model (over the char tokenizer) with the weights of `file`, a critic.pt.
ppo::ValueModel tiny_value_model(const std::string& file) {
  const ppo::Config c = ppo::load_config({ppo_test::paths().source_dir + "/configs/regression_tiny.yaml"}, {});
  ppo::ValueModel model(c.model, 99);
  ppo::load_module(*model, file);
  return model;
}

}  // namespace

TEST_CASE("preference pairs: TRL's and OpenRLHF's layouts, in JSONL and Parquet", "[cpu][rm]") {
  ppo_test::TempDir tmp("ppo_pairs");
  const std::vector<json> records = {
      {{"prompt", "2+2="}, {"chosen", "4"}, {"rejected", "5"}},
      {{"prompt", json::array({message("user", "hi")})},
       {"chosen", json::array({message("assistant", "hello")})},
       {"rejected", json::array({message("assistant", "go away")})},
       {"margin", 1.5}},
      {{"chosen", json::array({message("system", "be kind"), message("user", "hi"), message("assistant", "hello")})},
       {"rejected", json::array({message("system", "be kind"), message("user", "hi"), message("assistant", "no")})}},
  };
  write_lines(tmp.sub("pairs.jsonl"), records);
  const auto pairs = ppo::load_preference_pairs(tmp.sub("pairs.jsonl"), {});
  REQUIRE(pairs.size() == 3);
  CHECK(pairs[0].prompt.prompt == "2+2=");
  CHECK_FALSE(pairs[0].prompt.prompt_is_chat);
  CHECK(pairs[0].chosen == "4");
  CHECK(pairs[0].rejected == "5");
  CHECK(pairs[0].margin == 0);
  CHECK(pairs[1].prompt.messages == json::array({message("user", "hi")}));
  CHECK(pairs[1].chosen == "hello");
  CHECK(pairs[1].margin == 1.5);
  CHECK(pairs[2].prompt.prompt_is_chat);  // the implicit prompt: the messages before the responses
  CHECK(pairs[2].prompt.messages == json::array({message("system", "be kind"), message("user", "hi")}));
  CHECK(pairs[2].rejected == "no");
  CHECK(pairs[2].prompt.origin == tmp.sub("pairs.jsonl") + ":3");

  // Other key names (OpenRLHF's --prompt_key, --chosen_key, --rejected_key).
  write_lines(tmp.sub("keys.jsonl"), {{{"q", "x"}, {"good", "y"}, {"bad", "z"}, {"m", 2}}});
  const auto keyed = ppo::load_preference_pairs(tmp.sub("keys.jsonl"), {"q", "good", "bad", "m"});
  REQUIRE(keyed.size() == 1);
  CHECK(keyed[0].prompt.prompt == "x");
  CHECK(keyed[0].chosen == "y");
  CHECK(keyed[0].margin == 2);

  if (ppo::parquet_supported()) {  // the same records as Parquet read as the same pairs
    ppo::write_parquet({records[1], records[2]}, tmp.sub("pairs.parquet"));
    const auto parquet = ppo::load_preference_pairs(tmp.sub("pairs.parquet"), {});
    REQUIRE(parquet.size() == 2);
    CHECK(parquet[0].prompt.messages == pairs[1].prompt.messages);
    CHECK(parquet[0].chosen == "hello");
    CHECK(parquet[0].margin == 1.5);
    CHECK(parquet[1].prompt.messages == pairs[2].prompt.messages);  // the prompt column null: the implicit prompt
    CHECK(parquet[1].margin == 0);                                  // null in the column
    CHECK(parquet[1].prompt.origin == tmp.sub("pairs.parquet") + ": row 1");
  }
}

TEST_CASE("pair files and settings ppo rm cannot train on exit 2 with one error line naming the row and field",
          "[cpu][cli][rm]") {
  ppo_test::TempDir tmp("ppo_pairs_bad");
  write_lines(tmp.sub("good.jsonl"), letter_pairs(8, 0));
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"prompt", "p"}, {"rejected", "b"}}, ":1: missing field 'chosen' (data.chosen_key)"},
      {{{"prompt", "p"}, {"chosen", ""}, {"rejected", "b"}}, ":1: field 'chosen': the response is empty"},
      {{{"prompt", "p"}, {"chosen", "a"}, {"rejected", "a"}}, ":1: field 'rejected': the same response as 'chosen'"},
      {{{"chosen", "a"}, {"rejected", "b"}}, ":1: missing field 'prompt' (data.prompt_key)"},
      {{{"chosen", json::array({message("user", "x"), message("assistant", "a")})},
        {"rejected", json::array({message("user", "y"), message("assistant", "b")})}},
       ":1: fields 'chosen' and 'rejected': their messages before the response differ"},
      {{{"prompt", "p"}, {"chosen", json::array({message("assistant", "a"), message("user", "b")})}, {"rejected", "b"}},
       ":1: field 'chosen': the last message is a user message"},
      {{{"prompt", "p"}, {"chosen", "a"}, {"rejected", "b"}, {"margin", "big"}},
       ":1: field 'margin': expected a finite number"},
      {{{"prompt", "p"}, {"chosen", "aaaaaaaaaaaa"}, {"rejected", "b"}},
       ":1: field 'chosen': 13 tokens with EOS, more than data.max_response_length=8"},
  };
  for (const auto& [record, expected] : bad) {
    INFO(record.dump());
    write_lines(tmp.sub("bad.jsonl"), {record});
    ppo_test::check_one_error(
        ppo_test::run_ppo(rm_command(tmp.sub("run"), tmp.sub("bad.jsonl"), tmp.sub("good.jsonl"), "")),
        tmp.sub("bad.jsonl") + expected);
  }
  const std::string good = rm_command(tmp.sub("run"), tmp.sub("good.jsonl"), tmp.sub("good.jsonl"), "");
  ppo_test::check_one_error(ppo_test::run_ppo(good + "critic.use_dynamic_bsz=true"),
                            "critic.use_dynamic_bsz=true: ppo rm forms its micro-batches by a count");
  ppo_test::check_one_error(ppo_test::run_ppo(good + "critic.ppo_micro_batch_size_per_gpu=3"),
                            "does not divide the per-rank mini-batch (critic.ppo_mini_batch_size / 1 ranks x 2 "
                            "sequences per pair = 8 responses)");
  ppo_test::check_one_error(
      ppo_test::run_ppo(good + "critic.ppo_mini_batch_size=2 critic.ppo_micro_batch_size_per_gpu=1"),
      "critic.ppo_micro_batch_size_per_gpu=1 splits a pair");
  ppo_test::check_one_error(ppo_test::run_ppo(good + "reward_model.enable=true reward_model.model.path=x"),
                            "ppo rm has no reward");
  ppo_test::check_one_error(
      ppo_test::run_ppo("rm " + ppo_test::kTinyOneThread + "trainer.output_dir=" + tmp.sub("run")),
      "ppo rm needs data.train_files: preference pairs");
  ppo_test::check_one_error(ppo_test::run_ppo("train " + ppo_test::kTinyOneThread + "trainer.output_dir=" +
                                              tmp.sub("run") + " critic.center_rewards_coefficient=0.01"),
                            "critic.center_rewards_coefficient applies to ppo rm's loss");
  CHECK_FALSE(std::filesystem::exists(tmp.sub("run") + "/metrics.jsonl"));
}

TEST_CASE("ppo rm equals a Bradley-Terry loop in PyTorch on transformers' classifier, and its export scores alike",
          "[cpu][hf][ref][rm]") {
  ppo_test::TempDir tmp("ppo_rm_ref");
  // A random Llama classifier over the char tokenizer's 99 ids (pad_token_id 0, never in text), the start of both.
  ppo_test::run_reference("hf_reward.py", "make llama \"" + tmp.sub("start") + "\" 99");
  std::vector<json> train = letter_pairs(8, 1), val = letter_pairs(6, 4);
  train[1]["margin"] = 0.5;
  train[6]["margin"] = -0.25;
  write_lines(tmp.sub("train.jsonl"), train);
  write_lines(tmp.sub("val.jsonl"), val);
  const std::string shape =
      "model.hidden_size=64 model.intermediate_size=128 model.num_layers=3 model.num_heads=8 model.num_kv_heads=2 "
      "model.max_position_embeddings=256 critic.model.path=" +
      tmp.sub("start") +
      " critic.optim.lr=0.003 critic.optim.eps=0.001 critic.optim.weight_decay=0.01 "
      "critic.center_rewards_coefficient=0.05"
      " data.shuffle=false"
      " trainer.total_training_steps=4 trainer.test_freq=4 trainer.val_before_train=false ";
  // The ids ppo rm trains on, for the reference.
  ppo::Config config = ppo::load_config(
      {ppo_test::paths().source_dir + "/configs/regression_tiny.yaml"},
      {"data.train_files=[" + tmp.sub("train.jsonl") + "]", "data.val_files=[" + tmp.sub("val.jsonl") + "]",
       "data.max_prompt_length=8", "data.max_response_length=8"});
  const auto tokenizer = ppo::make_tokenizer("char");
  json spec = {{"train", json::array()}, {"val", json::array()}, {"steps", 4},       {"batch", 4},    {"lr", 0.003},
               {"eps", 0.001},           {"weight_decay", 0.01}, {"grad_clip", 1.0}, {"center", 0.05}};
  for (const ppo::EncodedPair& p : ppo::load_pairs(config, *tokenizer, true)) {
    std::vector<int64_t> chosen = p.prompt, rejected = p.prompt;
    chosen.insert(chosen.end(), p.chosen.begin(), p.chosen.end());
    rejected.insert(rejected.end(), p.rejected.begin(), p.rejected.end());
    spec["train"].push_back({chosen, rejected, p.margin});
  }
  for (const ppo::EncodedPair& p : ppo::load_pairs(config, *tokenizer, false)) {
    std::vector<int64_t> chosen = p.prompt, rejected = p.prompt;
    chosen.insert(chosen.end(), p.chosen.begin(), p.chosen.end());
    rejected.insert(rejected.end(), p.rejected.begin(), p.rejected.end());
    spec["val"].push_back({chosen, rejected});
  }
  for (const std::string packing : {"true", "false"}) {
    INFO("critic.use_remove_padding=" << packing);
    const std::string run = tmp.sub("run_" + packing), exported = tmp.sub("export_" + packing);
    const ppo_test::Result r = ppo_test::run_ppo(rm_command(run, tmp.sub("train.jsonl"), tmp.sub("val.jsonl"),
                                                            shape +
                                                                "critic.ppo_micro_batch_size_per_gpu=2 "
                                                                "critic.use_remove_padding=" +
                                                                packing));
    INFO(r.output);
    REQUIRE(r.status == 0);
    const ppo_test::Result e =
        ppo_test::run_ppo("export --checkpoint " + run + "/checkpoints/global_step_4 --out " + exported);
    INFO(e.output);
    REQUIRE(e.status == 0);
    CHECK_THAT(e.output, Contains("a reward model"));
    spec["exported"] = exported;
    std::ofstream(tmp.sub("spec.json")) << spec.dump();
    ppo_test::run_reference("hf_rm_train.py", "\"" + tmp.sub("start") + "\" \"" + tmp.sub("spec.json") + "\" \"" +
                                                  tmp.sub("ref.json") + "\"");
    std::ifstream in(tmp.sub("ref.json"));
    const json ref = json::parse(in);
    const auto metrics = ppo::read_jsonl(run + "/metrics.jsonl");
    REQUIRE(metrics.size() == 4);
    for (size_t step = 0; step < 4; ++step) {
      INFO("step " << step + 1);
      CHECK(metrics[step]["rm/loss"].get<double>() == Approx(ref["losses"][step].get<double>()).epsilon(2e-4));
      CHECK(metrics[step]["rm/accuracy"].get<double>() == ref["accuracies"][step].get<double>());
    }
    // Both trained the same way: the exported folder, read by transformers, scores the held-out pairs as the
    // PyTorch-trained model does; and ppo rm's validation read them so.
    double correct = 0;
    for (size_t i = 0; i < ref["val"].size(); ++i) {
      for (int side = 0; side < 2; ++side)
        CHECK(ref["exported"][i][side].get<double>() == Approx(ref["val"][i][side].get<double>()).margin(2e-4));
      correct += ref["exported"][i][0].get<double>() > ref["exported"][i][1].get<double>();
    }
    CHECK(metrics[3]["val/pairs/acc/mean"].get<double>() == Approx(correct / 6.0));
    const json config_json = json::parse(std::ifstream(exported + "/config.json"));
    CHECK(config_json["architectures"][0] == "LlamaForSequenceClassification");
    CHECK(config_json["id2label"].size() == 1);
  }
}

TEST_CASE("ppo rm learns held-out pairs, and resumes to the same numbers", "[cpu][rm]") {
  ppo_test::TempDir tmp("ppo_rm_learn");
  write_lines(tmp.sub("train.jsonl"), letter_pairs(64, 0));
  write_lines(tmp.sub("val.jsonl"), letter_pairs(16, 7));
  const std::string settings =
      "critic.optim.lr=0.003 data.train_batch_size=8 critic.ppo_mini_batch_size=8 "
      "critic.ppo_micro_batch_size_per_gpu=8 "
      "trainer.total_training_steps=24 trainer.test_freq=12 trainer.save_freq=12 ";
  const ppo_test::Result r =
      ppo_test::run_ppo(rm_command(tmp.sub("full"), tmp.sub("train.jsonl"), tmp.sub("val.jsonl"), settings));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Contains("validation before training: pair acc"));
  const auto metrics = ppo::read_jsonl(tmp.sub("full") + "/metrics.jsonl");
  REQUIRE(metrics.size() == 25);  // validation before training, then 24 steps
  const double before = metrics[0]["val/pairs/acc/mean"].get<double>();
  const double after = metrics[24]["val/pairs/acc/mean"].get<double>();
  CHECK(before < 0.8);
  CHECK(after >= 0.9);
  CHECK(metrics[24]["val/pairs/loss/mean"].get<double>() < metrics[0]["val/pairs/loss/mean"].get<double>());

  // Stopped after step 12 and resumed: the same numbers to the end.
  const ppo_test::Result first = ppo_test::run_ppo(rm_command(
      tmp.sub("split"), tmp.sub("train.jsonl"), tmp.sub("val.jsonl"), settings + "trainer.total_training_steps=12"));
  REQUIRE(first.status == 0);
  const ppo_test::Result second = ppo_test::run_ppo(rm_command(
      tmp.sub("split"), tmp.sub("train.jsonl"), tmp.sub("val.jsonl"), settings + "trainer.resume_mode=auto"));
  INFO(second.output);
  REQUIRE(second.status == 0);
  CHECK_THAT(second.output, Contains("resumed from"));
  const auto resumed = ppo::read_jsonl(tmp.sub("split") + "/metrics.jsonl");
  REQUIRE(resumed.size() == metrics.size());
  for (size_t i = 0; i < metrics.size(); ++i)
    for (const auto& [key, value] : metrics[i].items())
      if (!ppo_test::skip_key(key) && value.is_number()) {
        INFO("line " << i << " " << key);
        CHECK(resumed[i][key].get<double>() == value.get<double>());
      }
  const auto full = tiny_value_model(tmp.sub("full") + "/checkpoints/global_step_24/critic.pt");
  const auto split = tiny_value_model(tmp.sub("split") + "/checkpoints/global_step_24/critic.pt");
  auto split_params = split->named_parameters();
  for (const auto& item : full->named_parameters()) CHECK(torch::equal(item.value(), split_params[item.key()]));
}

TEST_CASE("ppo rm on N ranks equals 1 rank: data parallel, packed or padded, ZeRO-3 and LoRA", "[mpi][rm]") {
  ppo_test::TempDir tmp("ppo_rm_mpi");
  write_lines(tmp.sub("train.jsonl"), letter_pairs(16, 0));
  write_lines(tmp.sub("val.jsonl"), letter_pairs(7, 3));  // 7: a padding pair on the second rank
  const std::string settings =
      "data.train_batch_size=8 critic.ppo_mini_batch_size=4 critic.ppo_micro_batch_size_per_gpu=2 "
      "trainer.total_training_steps=3 trainer.test_freq=3 trainer.val_before_train=false ";
  for (const std::string extra :
       {"", "critic.use_remove_padding=false", "parallel.zero_stage=3", "critic.lora.rank=4 critic.lora.alpha=8"}) {
    INFO(extra);
    const std::string one = tmp.sub("one"), two = tmp.sub("two");
    ppo::remove_tree(one);
    ppo::remove_tree(two);
    const ppo_test::Result a =
        ppo_test::run_ppo(rm_command(one, tmp.sub("train.jsonl"), tmp.sub("val.jsonl"), settings + extra));
    INFO(a.output);
    REQUIRE(a.status == 0);
    const ppo_test::Run b =
        ppo_test::run(ppo_test::mpirun(2) + ppo_test::paths().ppo_binary + " " +
                      rm_command(two, tmp.sub("train.jsonl"), tmp.sub("val.jsonl"), settings + extra));
    INFO(b.output);
    REQUIRE(b.status == 0);
    const auto ma = ppo::read_jsonl(one + "/metrics.jsonl"), mb = ppo::read_jsonl(two + "/metrics.jsonl");
    REQUIRE(ma.size() == 3);
    REQUIRE(mb.size() == 3);
    for (size_t i = 0; i < ma.size(); ++i)
      for (const auto& [key, value] : ma[i].items()) {
        if (ppo_test::skip_key(key) || !value.is_number()) continue;
        INFO("step " << i + 1 << " " << key);
        const double x = value.get<double>(), y = mb[i][key].get<double>();
        CHECK(std::abs(x - y) <= ppo_test::kRankTolerance * std::max(std::abs(x), std::abs(y)) + 1e-6);
      }
    CHECK(ma[2].contains("val/pairs/acc/mean"));
    CHECK(ma[2].contains("rm/grad_norm"));
  }
}

TEST_CASE("the critic starts from a reward model's folder (critic.model.path) or an SFT checkpoint's policy",
          "[cpu][rm]") {
  ppo_test::TempDir tmp("ppo_rm_critic");
  ppo_test::write_reward_model(tmp.sub("rm"));
  const std::vector<std::string> shape = {"model.hidden_size=32", "model.intermediate_size=64",
                                          "model.num_layers=2",   "model.num_heads=4",
                                          "model.num_kv_heads=2", "model.tokenizer=" + tmp.sub("rm")};
  auto config_with = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> overrides = shape;
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    ppo::Config c = ppo::load_config({ppo_test::paths().source_dir + "/configs/regression_tiny.yaml"}, overrides);
    ppo::check_config(c, 1);
    return c;
  };
  const ppo::Config from_rm = config_with({"critic.model.path=" + tmp.sub("rm")});
  ppo::Critic critic(from_rm, 303, 1);
  const auto tensors = ppo::load_safetensors(tmp.sub("rm") + "/model.safetensors");
  CHECK(torch::equal(critic.model()->value_head->weight, tensors.at("score.weight")));
  CHECK(critic.model()->value_head->bias.abs().max().item<float>() == 0.0f);
  CHECK(torch::equal(critic.model()->model->embed_tokens->weight, tensors.at("model.embed_tokens.weight")));
  CHECK_THAT(
      ppo_test::usage_error_message([&] {
        ppo::Critic wrong(config_with({"critic.model.path=" + tmp.sub("rm"), "model.intermediate_size=128"}), 303, 1);
      }),
      Contains("critic.model.path " + tmp.sub("rm") +
               ": model.intermediate_size is 128 but its config.json "
               "has 64"));

  // An SFT run's checkpoint holds actor.pt alone: the critic takes its backbone, its value head seeded.
  const ppo::Config plain = config_with({});
  auto actor = ppo::Actor::policy(plain, 303, 1);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : actor->model()->parameters()) p.add_(0.01);  // not the seeded init
  }
  std::filesystem::create_directories(tmp.sub("sft"));
  actor->save(tmp.sub("sft"));
  ppo::write_manifest(tmp.sub("sft"));  // as the run writes one beside the files
  ppo::Critic from_sft(config_with({"critic.init_checkpoint=" + tmp.sub("sft")}), 303, 1);
  ppo::Critic seeded(plain, 303, 1);
  auto policy = actor->model()->model->named_parameters();
  for (const auto& item : from_sft.model()->model->named_parameters()) {
    INFO(item.key());
    CHECK(torch::equal(item.value(), policy[item.key()]));
  }
  CHECK(torch::equal(from_sft.model()->value_head->weight, seeded.model()->value_head->weight));
}
