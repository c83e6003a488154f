// Reward models (model/reward_model.h, workers/reward_worker.h): *ForSequenceClassification folders read and scored
// as transformers' AutoModelForSequenceClassification scores them, whole and a slice at a time (ZeRO-3's loading),
// `ppo score --reward-model`, and the folders that are refused.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "common/jsonl.h"
#include "model/hf.h"
#include "model/reward_model.h"
#include "model/safetensors.h"
#include "tests/app/run_ppo.h"
#include "tests/model/hf_folder.h"
#include "tests/model/tiny_tokenizer.h"
#include "tests/paths.h"
#include "tests/reference/reference.h"
#include "tests/temp_dir.h"
#include "tests/text_file.h"
#include "tests/usage_error.h"
#include "workers/reward_worker.h"

using Catch::Matchers::Contains;
using nlohmann::json;

TEST_CASE("reward models: scores of Qwen2, Llama, Qwen3 and Mistral classifiers equal transformers'",
          "[cpu][hf][ref]") {
  // Rows of many lengths (the Mistral window is 8 tokens), one ending in pad_token_id (0) tokens and one holding it
  // inside: transformers scores the last token that is not the pad id, so the first is scored before its zeros.
  std::vector<std::vector<int64_t>> rows;
  for (int64_t n : {1, 3, 7, 12, 19, 33, 40}) {
    std::vector<int64_t> row;
    for (int64_t t = 0; t < n; ++t) row.push_back(1 + (t * 37 + n * 11) % 255);
    rows.push_back(row);
  }
  rows.push_back({5, 9, 14, 0, 0});
  rows.push_back({5, 0, 14, 3});
  ppo_test::TempDir tmp("ppo_rm_ref");
  std::ofstream(tmp.sub("inputs.json")) << json{{"rows", rows}};
  for (const std::string kind : {"qwen2", "llama", "qwen3", "mistral"}) {
    INFO(kind);
    const std::string dir = tmp.sub(kind);
    ppo_test::run_reference("hf_reward.py", "make " + kind + " \"" + dir + "\"");
    ppo_test::run_reference(
        "hf_reward.py", "run \"" + dir + "\" \"" + tmp.sub("inputs.json") + "\" \"" + tmp.sub(kind + ".json") + "\"");
    std::ifstream in(tmp.sub(kind + ".json"));
    const json ref = json::parse(in);
    const std::vector<double> right = ref.at("right").get<std::vector<double>>();
    const std::vector<double> left = ref.at("left").get<std::vector<double>>();
    REQUIRE(left.size() == right.size());
    for (size_t i = 0; i < right.size(); ++i)  // both paddings pick the same token
      REQUIRE(std::abs(left[i] - right[i]) <= 1e-5 * std::max(1.0, std::abs(right[i])));

    const ppo::HfModelInfo info = ppo::read_hf_config(dir, ppo::ModelConfig{});
    CHECK(info.sequence_classifier);
    CHECK(info.num_labels == 1);
    CHECK(info.pad_token_id == 0);
    ppo::ValueModel model(info.config, info.config.vocab_size);
    ppo::load_hf_weights(*model, dir, /*allow_missing_value_head=*/false);
    CHECK(model->value_head->bias.abs().max().item<float>() == 0.0f);  // score has no bias
    // Read a slice at a time (ZeRO-3's sharded loading) into a model with its seeded init, every parameter is what
    // the whole read gives: the score head's weight included, its bias zero.
    const ppo::HfWeightParts parts(dir, /*allow_missing_value_head=*/true, info.config.qk_norm);
    ppo::ValueModel fresh(info.config, info.config.vocab_size);
    const auto loaded = model->named_parameters();
    for (const auto& item : fresh->named_parameters()) {
      INFO(item.key());
      parts.check(item.key(), item.value());
      const int64_t numel = item.value().numel(), half = numel / 2;
      const torch::Tensor whole = loaded[item.key()].detach().reshape({-1});
      CHECK(torch::equal(parts.part(item.key(), item.value(), 0, half), whole.narrow(0, 0, half)));
      CHECK(
          torch::equal(parts.part(item.key(), item.value(), half, numel - half), whole.narrow(0, half, numel - half)));
    }
    // One left-padded batch of every row, then one row at a time: the same scores.
    const int64_t B = static_cast<int64_t>(rows.size()), T = 40;
    torch::Tensor ids = torch::zeros({B, T}, torch::kLong), mask = torch::zeros({B, T}, torch::kLong);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = static_cast<int64_t>(rows[b].size());
      ids[b].narrow(0, T - n, n).copy_(torch::tensor(rows[b]));
      mask[b].narrow(0, T - n, n).fill_(1);
    }
    const torch::Tensor scores = ppo::sequence_scores(model, ids, mask, info.pad_token_id);
    // Packed (the reward worker's forward): the same scores.
    const torch::Tensor packed = ppo::packed_sequence_scores(model, ids, mask, info.pad_token_id);
    CHECK((packed - scores).abs().max().item<double>() <= 1e-5 * std::max(1.0, scores.abs().max().item<double>()));
    double worst = 0, largest = 0;
    for (int64_t b = 0; b < B; ++b) {
      const double ours = scores[b].item<double>();
      worst = std::max(worst, std::abs(ours - right[b]));
      largest = std::max(largest, std::abs(right[b]));
      const torch::Tensor one = torch::tensor(rows[b]).unsqueeze(0);
      const double alone = ppo::sequence_scores(model, one, torch::ones_like(one), info.pad_token_id).item<double>();
      CHECK(std::abs(alone - ours) <= 1e-5 * std::max(1.0, std::abs(ours)));
    }
    std::printf("reward model %s: %ld scores, max |diff| %.3g against transformers' (largest |score| %.3g)\n",
                kind.c_str(), B, worst, largest);
    CHECK(worst <= 1e-5 * std::max(1.0, largest));
    // The row that ends in pad ids is scored at its last other token, as transformers scores it.
    const torch::Tensor trimmed = torch::tensor(std::vector<int64_t>{5, 9, 14}).unsqueeze(0);
    CHECK(std::abs(ppo::sequence_scores(model, trimmed, torch::ones_like(trimmed), -1).item<double>() - right[7]) <=
          1e-5 * std::max(1.0, largest));
  }
}

TEST_CASE("reward models: a classifier without tokenizer.json, and a non-finite score, are errors naming them",
          "[cpu][hf][ref]") {
  ppo_test::TempDir tmp("ppo_rm_nan");
  const std::string dir = tmp.sub("rm");
  const json tokenizer = ppo_test::tiny_tokenizer_json();
  ppo_test::run_reference("hf_reward.py", "make llama \"" + dir + "\" 302");
  CHECK_THAT(ppo_test::usage_error_message([&] { ppo::RewardModelFolder(dir, ppo::ModelConfig{}); }),
             Contains(dir + ": no tokenizer.json"));
  std::ofstream(dir + "/tokenizer.json") << tokenizer.dump();
  CHECK(ppo::RewardWorker(ppo::Config{}, dir, torch::kCPU).score_rows({{259, 260}, {300}}, 1).size() == 2);
  // A score head of NaN: the score names the folder and the row.
  std::map<std::string, torch::Tensor> tensors = ppo::load_safetensors(dir + "/model.safetensors");
  tensors.at("score.weight").fill_(std::numeric_limits<float>::quiet_NaN());
  ppo::save_safetensors(dir + "/model.safetensors", tensors, json{{"format", "pt"}});
  ppo::RewardWorker poisoned(ppo::Config{}, dir, torch::kCPU);
  CHECK_THAT(ppo_test::usage_error_message([&] {
               poisoned.score_rows({{259, 260}}, 1);
             }),
             Contains(dir + ": the reward model's score of row 0 is not finite"));
}

TEST_CASE("ppo score --reward-model: a Qwen3 classifier with Qwen3's tokenizer and template scores as transformers",
          "[cpu][hf][ref][cli]") {
  ppo_test::TempDir tmp("ppo_rm_cli");
  const std::string dir = tmp.sub("rm");
  ppo_test::run_reference("hf_reward.py",
                          "make qwen3 \"" + dir + "\" 151669 \"" + ppo_test::ref_path("tokenizers/qwen3") + "\"");
  const std::vector<json> prompts = {
      json::array({{{"role", "user"}, {"content", "What is 2 + 3?"}}}),
      json::array(
          {{{"role", "system"}, {"content", "Answer with a number."}}, {{"role", "user"}, {"content", "7 * 6?"}}}),
      json::array({{{"role", "user"}, {"content", "Name a prime."}}}),
  };
  const std::vector<std::string> responses = {"5", "<think>\n7 sixes\n</think>\n\n42", "Seven!\n"};
  {
    std::ofstream data(tmp.sub("data.jsonl")), out(tmp.sub("responses.jsonl")), pairs(tmp.sub("pairs.jsonl"));
    for (size_t i = 0; i < prompts.size(); ++i) {
      data << json{{"prompt", prompts[i]}, {"data_source", "openai/gsm8k"}, {"reward_model", {{"ground_truth", "5"}}}}
           << "\n";
      out << json{{"response", responses[i]}} << "\n";
      pairs << json{{"messages", prompts[i]}, {"response", responses[i]}} << "\n";
    }
  }
  ppo_test::run_reference(
      "hf_reward.py", "chat \"" + dir + "\" < \"" + tmp.sub("pairs.jsonl") + "\" > \"" + tmp.sub("ref.jsonl") + "\"");
  const std::vector<json> ref = ppo::read_jsonl(tmp.sub("ref.jsonl"));
  REQUIRE(ref.size() == responses.size());

  const ppo_test::Result r =
      ppo_test::run_ppo("score --task reverse --data " + tmp.sub("data.jsonl") + " --responses " +
                        tmp.sub("responses.jsonl") + " --reward-model " + dir + " --rm-micro-batch 2");
  INFO(r.output);
  REQUIRE(r.status == 0);
  std::vector<double> ours;
  const std::regex line("\\trm ([-+][0-9.]+)");
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), line); it != std::sregex_iterator(); ++it)
    ours.push_back(std::stod((*it)[1].str()));
  REQUIRE(ours.size() == ref.size());
  for (size_t i = 0; i < ours.size(); ++i) CHECK(std::abs(ours[i] - ref[i].at("score").get<double>()) <= 2e-6);
  CHECK_THAT(r.output, Contains("reward model mean score"));

  // The same ids as transformers' apply_chat_template (Qwen3's empty reasoning block in the first and last turns).
  const ppo::RewardModelFolder rm(dir, ppo::ModelConfig{});
  for (size_t i = 0; i < prompts.size(); ++i)
    CHECK(rm.encode(prompts[i], responses[i]) == ref[i].at("ids").get<std::vector<int64_t>>());
}

TEST_CASE("reward model folders that are not one-label classifiers, and a classifier as the policy, exit 2",
          "[cpu][cli][hf]") {
  ppo_test::TempDir tmp("ppo_rm_bad");
  ppo_test::write_hf_model(tmp.sub("lm"));
  const auto patched = [&](const std::string& name, const json& changes) {
    const std::string dir = tmp.sub(name);
    std::filesystem::copy(tmp.sub("lm"), dir, std::filesystem::copy_options::recursive);
    std::ifstream in(dir + "/config.json");
    json config = json::parse(in);
    config.update(changes);
    ppo_test::write_text(dir + "/config.json", config.dump());
    return dir;
  };
  const std::string two_labels =
      patched("two", {{"architectures", {"LlamaForSequenceClassification"}}, {"id2label", {{"0", "A"}, {"1", "B"}}}});
  const std::string no_score =
      patched("noscore", {{"architectures", {"LlamaForSequenceClassification"}}, {"id2label", {{"0", "A"}}}});
  std::ofstream(tmp.sub("data.jsonl")) << json{{"prompt", json::array({{{"role", "user"}, {"content", "hi"}}})},
                                               {"data_source", "openai/gsm8k"},
                                               {"reward_model", {{"ground_truth", "1"}}}}
                                       << "\n";
  std::ofstream(tmp.sub("responses.jsonl")) << json{{"response", "1"}} << "\n";
  const std::string score =
      "score --task reverse --data " + tmp.sub("data.jsonl") + " --responses " + tmp.sub("responses.jsonl");
  ppo_test::check_one_error(ppo_test::run_ppo(score + " --reward-model " + tmp.sub("lm")),
                            "names LlamaForCausalLM; a reward model is a *ForSequenceClassification folder");
  ppo_test::check_one_error(ppo_test::run_ppo(score + " --reward-model " + two_labels),
                            "the classifier has 2 labels (id2label or num_labels); a reward model has one");
  ppo_test::check_one_error(ppo_test::run_ppo(score + " --reward-model " + no_score), "no tensor score.weight");
  ppo_test::check_one_error(ppo_test::run_ppo(score + " --reward-model " + no_score + " --rm-micro-batch 0"),
                            "--rm-micro-batch must be at least 1");
  ppo_test::check_one_error(ppo_test::run_ppo("config --config " + ppo_test::paths().source_dir +
                                              "/configs/regression_tiny.yaml model.path=" + no_score),
                            "is a LlamaForSequenceClassification folder (a reward model)");
}
