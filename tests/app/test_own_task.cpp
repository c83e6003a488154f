// Bring your own task, end to end: the GSM8K-style worked example (veRL records, chat prompts, the gsm8k reward by
// data_source), the same run scored by an external reward program, and the errors of bad records and programs.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/jsonl.h"
#include "tests/app/run_ppo.h"
#include "tests/paths.h"
#include "tests/temp_dir.h"

using Catch::Contains;
using ppo_test::count_lines;
using ppo_test::Result;
using ppo_test::run_ppo;

namespace {

const std::string kConfig =
    "--config " + ppo_test::paths().source_dir + "/configs/gsm8k_style.yaml trainer.num_threads=1 ";

// The worked example's data, written by its script into `dir`.
void make_data(const ppo_test::TempDir& dir, int train, int val) {
  const std::string cmd = "python3 " + ppo_test::paths().source_dir + "/scripts/gsm8k_style_data.py --out " +
                          dir.sub("data") + " --train " + std::to_string(train) + " --val " + std::to_string(val) +
                          " > /dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
}

std::string data_args(const ppo_test::TempDir& dir) {
  return "data.train_files=" + dir.sub("data/train.jsonl") + " data.val_files=" + dir.sub("data/val.jsonl") + " ";
}

}  // namespace

TEST_CASE("the GSM8K-style worked example runs end to end: SFT, then GRPO with the gsm8k reward", "[cpu][cli][own]") {
  ppo_test::TempDir dir("own_task");
  make_data(dir, 256, 32);
  Result sft =
      run_ppo("sft " + kConfig + data_args(dir) + "data.val_batch_size=32 trainer.total_training_steps=8 " +
              "trainer.test_freq=8 trainer.save_freq=8 actor.optim.lr=0.003 trainer.output_dir=" + dir.sub("sft"));
  INFO(sft.output);
  REQUIRE(sft.status == 0);
  CHECK_THAT(sft.output, Contains("val acc"));
  const std::string init = "actor.init_checkpoint=" + dir.sub("sft/checkpoints/global_step_8") + " ";
  const std::string rl = "train " + kConfig + data_args(dir) + init +
                         "data.val_batch_size=32 data.train_batch_size=8 actor.ppo_mini_batch_size=8 "
                         "trainer.total_training_steps=2 trainer.test_freq=2 ";
  Result builtin = run_ppo(rl + "trainer.output_dir=" + dir.sub("builtin"));
  INFO(builtin.output);
  REQUIRE(builtin.status == 0);
  CHECK_THAT(builtin.output, Contains("rewards by data source: gsm8k -> gsm8k"));
  const auto lines = ppo::read_jsonl(dir.sub("builtin/metrics.jsonl"));
  REQUIRE(lines.size() == 3);  // validation before training, steps 1 and 2
  CHECK(lines[0].contains("val/gsm8k/acc/mean"));
  CHECK(lines[0].contains("val/gsm8k/acc/1"));  // extra_info.difficulty: one- and two-step problems
  CHECK(lines[0].contains("val/gsm8k/acc/2"));
  for (const char* key : {"reward/gsm8k/score/mean", "reward/gsm8k/acc/mean", "critic/score/mean"})
    CHECK(lines[1].contains(key));
  CHECK(lines[1]["reward/gsm8k/score/mean"] == lines[1]["critic/score/mean"]);

  // The same run scored by the example reward program: the same rewards (both read the last "#### N" as a
  // number), and its extra field "has_answer" becomes a metric.
  Result external = run_ppo(rl + "reward.command='python3 " + ppo_test::paths().source_dir +
                            "/examples/reward/gsm8k_reward.py' " + "trainer.output_dir=" + dir.sub("external"));
  INFO(external.output);
  REQUIRE(external.status == 0);
  const auto ext = ppo::read_jsonl(dir.sub("external/metrics.jsonl"));
  REQUIRE(ext.size() == 3);
  CHECK(ext[1]["critic/score/mean"] == lines[1]["critic/score/mean"]);
  CHECK(ext[0]["val/gsm8k/acc/mean"] == lines[0]["val/gsm8k/acc/mean"]);
  CHECK(ext[1].contains("reward/gsm8k/has_answer/mean"));
  CHECK(ext[0].contains("val/gsm8k/has_answer/mean"));
}

TEST_CASE("bad records and failing reward programs stop with one error line and exit 2", "[cpu][cli][own]") {
  ppo_test::TempDir dir("own_task_errors");
  make_data(dir, 16, 8);
  const std::string base = "train " + kConfig + data_args(dir) +
                           "data.train_batch_size=8 actor.ppo_mini_batch_size=8 data.val_batch_size=8 "
                           "trainer.total_training_steps=1 trainer.output_dir=" +
                           dir.sub("run") + " ";
  std::ofstream(dir.sub("unknown.jsonl"))
      << R"({"data_source": "my/source", "prompt": "x", "reward_model": {"ground_truth": "1"}})"
      << "\n";
  std::ofstream(dir.sub("long.jsonl")) << R"({"data_source": "gsm8k", "prompt": ")" << std::string(300, 'x')
                                       << R"(", "reward_model": {"ground_truth": "1"}})"
                                       << "\n";
  // Answers the start-up request, then exits in the middle of the first step's batch.
  std::ofstream(dir.sub("dies.py")) << "import sys\nfor i, line in enumerate(sys.stdin):\n    if i == 3:\n"
                                       "        sys.exit(5)\n    print('{\"score\": 0}', flush=True)\n";
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"data.val_files=" + dir.sub("unknown.jsonl"),
       {dir.sub("unknown.jsonl") + ":1", "data_source 'my/source' has no built-in reward", "reward.command"}},
      {"data.val_files=" + dir.sub("long.jsonl"),
       {dir.sub("long.jsonl") + ":1", "more than data.max_prompt_length=160", "data.truncation"}},
      {"reward.function=f1", {"reward.function", "f1", "exact_match"}},
      {"data.truncation=center", {"data.truncation", "center", "middle"}},
      {"reward.command='exit 3'", {"reward.command 'exit 3'", "status 3"}},
      {"reward.command='echo not-json; cat > /dev/null'", {"reward.command", "not-json"}},
      {"reward.command='sleep 30' reward.timeout_s=0.5", {"reward.command 'sleep 30'", "reward.timeout_s"}},
      {"reward.command='python3 " + dir.sub("dies.py") + "' trainer.val_before_train=false",
       {"dies.py", "status 5", "response 2"}},
  };
  for (const auto& [args, expected] : cases) {
    Result r = run_ppo(base + args);
    INFO("ppo " << base + args << "\n" << r.output);
    CHECK(r.status == 2);
    CHECK(count_lines(r.output, "error: ") == 1);
    for (const std::string& e : expected) CHECK_THAT(r.output, Contains(e));
  }
}

TEST_CASE("data.filter_overlong_prompts skips and counts what data.truncation=error refuses", "[cpu][cli][own]") {
  ppo_test::TempDir dir("own_task_filter");
  make_data(dir, 16, 8);
  {
    std::ofstream val(dir.sub("data/val.jsonl"), std::ios::app);
    val << R"({"data_source": "gsm8k", "prompt": ")" << std::string(300, 'x')
        << R"(", "reward_model": {"ground_truth": "1"}})"
        << "\n";
  }
  Result r = run_ppo("train " + kConfig + data_args(dir) +
                     "data.train_batch_size=8 actor.ppo_mini_batch_size=8 data.val_batch_size=8 "
                     "trainer.total_training_steps=1 data.filter_overlong_prompts=true trainer.output_dir=" +
                     dir.sub("run"));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK_THAT(r.output,
             Contains("data.filter_overlong_prompts: skipped 1 of 9 prompts of " + dir.sub("data/val.jsonl")));
}
