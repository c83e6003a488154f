// The `ppo` command end to end: exit statuses, one `error:` line, and the small subcommands.
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "tests/app/run_ppo.h"

using ppo_test::count_lines;
using ppo_test::Result;
using ppo_test::run_ppo;

TEST_CASE("ppo config prints every section and applies overrides", "[cpu][cli]") {
  Result r = run_ppo("config actor.ppo_mini_batch_size=64 data.train_batch_size=64");
  REQUIRE(r.status == 0);
  for (const char* section :
       {"data:", "model:", "actor:", "rollout:", "ref:", "critic:", "algorithm:", "trainer:", "parallel:"})
    CHECK_THAT(r.output, Catch::Contains(std::string("\n") + section) || Catch::StartsWith(section));
  CHECK_THAT(r.output, Catch::Contains("  ppo_mini_batch_size: 64"));
}

TEST_CASE("bad input exits 2 with one error line", "[cpu][cli]") {
  std::ofstream("/tmp/ppo_cli_bad.yaml") << "data:\n  seed: [1\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"config actor.ppo_mini_batchsize=64", "did you mean actor.ppo_mini_batch_size?"},
      {"config data.train_batch_size=abc", "data.train_batch_size: 'abc' is not an integer"},
      {"config --config /tmp/ppo_cli_bad.yaml", "/tmp/ppo_cli_bad.yaml:"},
      {"config --config /tmp/ppo_cli_missing.yaml", "/tmp/ppo_cli_missing.yaml"},
      {"frobnicate", "unknown subcommand 'frobnicate'"},
      {"config --no-such-flag", "no-such-flag"},
      {"train data.train_batch_size=6", "actor.ppo_mini_batch_size=8 is larger than data.train_batch_size=6"},
      {"score --task kk --data /tmp/ppo_cli_missing.jsonl --responses /tmp/x.jsonl", "ppo_cli_missing.jsonl"},
      {"eval --checkpoint /tmp/ppo_cli_no_checkpoint", "/tmp/ppo_cli_no_checkpoint/actor.pt"},
  };
  for (const auto& [args, expected] : cases) {
    INFO("ppo " << args << "\n" << run_ppo(args).output);
    Result r = run_ppo(args);
    CHECK(r.status == 2);
    CHECK(count_lines(r.output, "error: ") == 1);
    CHECK_THAT(r.output, Catch::Contains(expected));
  }
}

TEST_CASE("ppo generate prints responses with rewards", "[cpu][cli]") {
  Result r = run_ppo("generate --config " PPO_SOURCE_DIR "/configs/regression_tiny.yaml --count 3");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(count_lines(r.output, "response: ") == 3 * 4);  // rollout.n = 4
  CHECK(count_lines(r.output, "reward: ") == 3 * 4);
}

TEST_CASE("ppo data and ppo score round trip a K&K file", "[cpu][cli]") {
  Result d = run_ppo("data kk --people 2 --count 3 --seed 5 --out /tmp/ppo_cli_kk.jsonl");
  REQUIRE(d.status == 0);
  Result again = run_ppo("data kk --people 2 --count 3 --seed 5 --out /tmp/ppo_cli_kk2.jsonl");
  REQUIRE(again.status == 0);
  std::ifstream a("/tmp/ppo_cli_kk.jsonl"), b("/tmp/ppo_cli_kk2.jsonl");
  std::string ta((std::istreambuf_iterator<char>(a)), {}), tb((std::istreambuf_iterator<char>(b)), {});
  CHECK(ta == tb);  // same seed, same file
  std::ofstream("/tmp/ppo_cli_r.jsonl") << "{\"response\": \"no tags\"}\n{\"response\": \"x\"}\n{\"response\": \"\"}\n";
  Result s = run_ppo("score --task kk --data /tmp/ppo_cli_kk.jsonl --responses /tmp/ppo_cli_r.jsonl");
  INFO(s.output);
  REQUIRE(s.status == 0);
  CHECK_THAT(s.output, Catch::Contains("accuracy 0.0000  mean score -3.0000"));
}

TEST_CASE("ppo sft writes a checkpoint that eval and train load", "[cpu][cli]") {
  const std::string cfg =
      "--config " PPO_SOURCE_DIR "/configs/regression_tiny.yaml actor.ppo_micro_batch_size_per_gpu=8 ";
  Result sft = run_ppo("sft " + cfg +
                       "trainer.output_dir=/tmp/ppo_cli_sft trainer.total_training_steps=100 trainer.test_freq=0 "
                       "actor.optim.lr=0.003 trainer.resume_mode=disable");
  INFO(sft.output);
  REQUIRE(sft.status == 0);
  const std::string ckpt = "/tmp/ppo_cli_sft/checkpoints/global_step_100";
  Result eval = run_ppo("eval " + cfg + "--checkpoint " + ckpt);
  INFO(eval.output);
  REQUIRE(eval.status == 0);
  // Measured: 100 SFT steps reach accuracy 1.000 on the 32 validation prompts; require most of it.
  size_t all = eval.output.find("\nall ");
  REQUIRE(all != std::string::npos);
  std::istringstream row(eval.output.substr(all + 1));
  std::string label;
  int prompts = 0;
  double accuracy = -1;
  row >> label >> prompts >> accuracy;
  CHECK(prompts == 32);
  CHECK(accuracy >= 0.8);
  Result train =
      run_ppo("train --config " PPO_SOURCE_DIR "/configs/regression_tiny.yaml actor.init_checkpoint=" + ckpt +
              " trainer.output_dir=/tmp/ppo_cli_rl trainer.total_training_steps=3 trainer.test_freq=0 "
              "trainer.val_before_train=false trainer.resume_mode=disable");
  INFO(train.output);
  REQUIRE(train.status == 0);
  CHECK_THAT(train.output, Catch::Contains("step 3/3"));
}
