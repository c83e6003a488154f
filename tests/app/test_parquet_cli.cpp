// Parquet data files through the `ppo` command: the worked example trains alike from JSONL and from the Parquet pandas
// writes of it; Logic-RL's K&K layout trains and scores through Logic-RL's rule with no conversion; damaged files stop
// the run with one error line.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "common/jsonl.h"
#include "tasks/parquet.h"
#include "tests/app/run_ppo.h"
#include "tests/paths.h"
#include "tests/reference/reference.h"
#include "tests/same_runs.h"
#include "tests/temp_dir.h"
#include "tests/text_file.h"

using Catch::Contains;
using ppo_test::Result;
using ppo_test::run_ppo;

namespace {

const std::string kConfig = "--config " + ppo_test::paths().source_dir + "/configs/gsm8k_style.yaml ";

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size())
    text.replace(at, from.size(), to);
  return text;
}

void convert(const std::string& from, const std::string& to) {
  ppo_test::run_reference("verl_parquet.py", "convert " + from + " " + to + " > /dev/null");
}

}  // namespace

TEST_CASE("the worked example trains to the same metrics from JSONL and from the Parquet pandas writes of it",
          "[cpu][cli][own][parquet][ref]") {
  ppo_test::TempDir dir("parquet_train");
  const std::string cmd = "python3 " + ppo_test::paths().source_dir + "/scripts/gsm8k_style_data.py --out " +
                          dir.sub("data") + " --train 64 --val 16 > /dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  convert(dir.sub("data/train.jsonl"), dir.sub("data/train.parquet"));
  convert(dir.sub("data/val.jsonl"), dir.sub("data/val.parquet"));
  const std::string run = "train " + kConfig +
                          "data.val_batch_size=16 data.train_batch_size=8 actor.ppo_mini_batch_size=8 "
                          "trainer.total_training_steps=2 trainer.test_freq=2 ";
  std::vector<std::vector<nlohmann::json>> metrics;
  for (const std::string form : {"jsonl", "parquet"}) {
    Result r = run_ppo(run + "data.train_files=" + dir.sub("data/train." + form) +
                       " data.val_files=" + dir.sub("data/val." + form) + " trainer.output_dir=" + dir.sub(form));
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK_THAT(r.output, Contains("rewards by data source: gsm8k -> gsm8k"));
    metrics.push_back(ppo::read_jsonl(dir.sub(form + "/metrics.jsonl")));
  }
  REQUIRE(metrics[0].size() == 3);  // validation, steps 1 and 2
  REQUIRE(metrics[1].size() == metrics[0].size());
  int compared = 0;
  for (size_t line = 0; line < metrics[0].size(); ++line) {
    for (const auto& [key, value] : metrics[0][line].items()) {
      if (ppo_test::skip_key(key)) continue;
      INFO("line " << line << ": " << key);
      REQUIRE(metrics[1][line].contains(key));
      CHECK(metrics[1][line][key].dump() == value.dump());
      ++compared;
    }
  }
  CHECK(compared > 50);
}

TEST_CASE("a K&K Parquet file in Logic-RL's layout trains, scored by its data_source through Logic-RL's rule",
          "[cpu][cli][own][parquet][ref]") {
  ppo_test::TempDir dir("parquet_kk");
  ppo_test::run_reference("verl_parquet.py", dir.sub("files") + " > /dev/null");
  const std::string kk = dir.sub("files/kk.parquet");  // pandas, zstd, 5 row groups; prompts of up to 330 characters
  // Logic-RL uses the prompt message's content as the whole prompt: data.chat_template=plain is the nearest form.
  Result r = run_ppo("train " + kConfig + "data.train_files=" + kk + " data.val_files=" + kk +
                     " data.max_prompt_length=400 model.max_position_embeddings=448 data.val_batch_size=30 "
                     "data.train_batch_size=8 actor.ppo_mini_batch_size=8 trainer.total_training_steps=2 "
                     "trainer.test_freq=2 trainer.output_dir=" +
                     dir.sub("run"));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Contains("rewards by data source: kk_logic -> kk"));
  const auto lines = ppo::read_jsonl(dir.sub("run/metrics.jsonl"));
  REQUIRE(lines.size() == 3);
  const double score = lines[1]["reward/kk_logic/score/mean"].get<double>();
  CHECK(score >= -3.0);
  CHECK(score <= 3.0);
  CHECK(lines[0].contains("val/kk_logic/acc/mean"));

  // Logic-RL's rule on known answers: the solution scores 3 (format 1, answer 2), the solution with every role
  // swapped -0.5 (format 1, wrong answer -1.5); the Parquet file and its JSONL twin score alike.
  const auto records = ppo::read_jsonl(dir.sub("files/kk.jsonl"));
  std::ofstream right(dir.sub("right.jsonl")), wrong(dir.sub("wrong.jsonl"));
  for (const auto& record : records) {
    const std::string solution = record["reward_model"]["ground_truth"]["solution_text_format"];
    const std::string swapped =
        replace_all(replace_all(replace_all(solution, "knight", "\x01"), "knave", "knight"), "\x01", "knave");
    right << nlohmann::json{{"response", "<think> checked </think> <answer> " + solution + " </answer>"}}.dump()
          << "\n";
    wrong << nlohmann::json{{"response", "<think> checked </think> <answer> " + swapped + " </answer>"}}.dump() << "\n";
  }
  right.close();
  wrong.close();
  for (const std::string& data : {kk, dir.sub("files/kk.jsonl")}) {
    Result ok = run_ppo("score --task kk --data " + data + " --responses " + dir.sub("right.jsonl"));
    INFO(ok.output);
    REQUIRE(ok.status == 0);
    CHECK_THAT(ok.output, Contains("accuracy 1.0000  mean score 3.0000"));
    Result bad = run_ppo("score --task kk --data " + data + " --responses " + dir.sub("wrong.jsonl"));
    INFO(bad.output);
    REQUIRE(bad.status == 0);
    CHECK_THAT(bad.output, Contains("accuracy 0.0000  mean score -0.5000"));
  }
}

TEST_CASE("a damaged or unreadable Parquet data file stops the run with one error line, exit 2", "[cpu][cli][data]") {
  ppo_test::TempDir dir("parquet_cli_errors");
  const std::string good = dir.sub("kk.parquet");
  const std::string tiny = "--config " + ppo_test::paths().source_dir + "/configs/regression_tiny.yaml ";
  if (!ppo::parquet_supported()) {
    ppo_test::check_one_error(run_ppo("data kk --count 4 --out " + good, 60),
                              "this build of ppo reads and writes no Parquet");
    return;
  }
  Result made = run_ppo("data kk --people 2 --count 4 --out " + good, 60);
  INFO(made.output);
  REQUIRE(made.status == 0);
  const std::string bytes = ppo_test::read_text(good);
  ppo_test::write_text(dir.sub("cut.parquet"), bytes.substr(0, bytes.size() / 2));
  ppo_test::check_one_error(
      run_ppo("train " + tiny + "data.train_files=" + dir.sub("cut.parquet") + " trainer.output_dir=" + dir.sub("run"),
              60),
      dir.sub("cut.parquet") + ": not a Parquet file, or a damaged one");
  ppo_test::check_one_error(run_ppo("train " + tiny + "'data.train_files=[" + good + ", " + dir.sub("none.parquet") +
                                        "]' trainer.output_dir=" + dir.sub("run"),
                                    60),
                            dir.sub("none.parquet"));
}
