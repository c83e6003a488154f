// `ppo train` with rollout.multi_turn on the tiny config: an environment that never says done is bounded by
// max_turns, "done" and rewards reach the trajectories, and a failing environment stops the run with one error line
// naming the command and the call, the steps already written kept.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/jsonl.h"
#include "tests/app/run_ppo.h"
#include "tests/paths.h"
#include "tests/temp_dir.h"

using Catch::Contains;
using ppo_test::Result;
using ppo_test::run_ppo;

namespace {

// Every turn that ends with EOS goes to the environment (no call markers): the tiny model's EOS comes often enough.
std::string multi_turn_args(const ppo_test::TempDir& dir, const std::string& environment_body,
                            const std::string& name = "env.py") {
  std::ofstream(dir.sub(name)) << "import json, sys, time\n"
                                  "for line in sys.stdin:\n"
                                  "    r = json.loads(line)\n"
                               << environment_body;
  return "train --config " + ppo_test::paths().source_dir +
         "/configs/regression_tiny.yaml data.max_response_length=48 model.max_position_embeddings=64 "
         "trainer.num_threads=1 rollout.multi_turn.enable=true rollout.multi_turn.call_start= "
         "rollout.multi_turn.stop= rollout.multi_turn.environment.command='python3 " +
         dir.sub(name) + "' ";
}

}  // namespace

TEST_CASE(
    "multi-turn training: an environment that never says done is bounded by max_turns, and done ends a "
    "trajectory with its reward",
    "[cpu][cli][multi_turn]") {
  ppo_test::TempDir dir("ppo_multi_turn");
  const std::string never_done = multi_turn_args(dir, "    print(json.dumps({'output': 'again'}), flush=True)\n");
  // Validation samples (val_temperature=1): the greedy tiny model ends no turn with EOS, so it would call nothing.
  Result r = run_ppo(never_done +
                     "rollout.multi_turn.max_turns=2 rollout.val_temperature=1 trainer.total_training_steps=2 "
                     "trainer.test_freq=2 " +
                     "trainer.output_dir=" + dir.sub("never"));
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto lines = ppo::read_jsonl(dir.sub("never/metrics.jsonl"));
  REQUIRE(lines.size() >= 2);
  for (const auto& line : lines) {
    if (!line.contains("tool/turns/mean")) continue;
    CHECK(line["tool/turns/mean"].get<double>() <= 2.0);
    CHECK(line["tool/calls/mean"].get<double>() > 0);
    CHECK(line["tool/calls/mean"].get<double>() <= 1.0);  // a call in the last turn is not answered
    CHECK(line["tool/appended_tokens/mean"].get<double>() > 0);
  }
  // Validation logs tool use too, per data source (the tiny config's is "reverse"): at most one answered call in two
  // turns, so the share of trajectories that called equals the calls per trajectory.
  int val_lines = 0;
  for (const auto& line : lines) {
    if (!line.contains("val/reverse/tool/turns/mean")) continue;
    ++val_lines;
    CHECK(line["val/reverse/tool/turns/mean"].get<double>() >= 1.0);
    CHECK(line["val/reverse/tool/turns/mean"].get<double>() <= 2.0);
    CHECK(line["val/reverse/tool/calls/mean"].get<double>() > 0);
    CHECK(line["val/reverse/tool/call_ratio/mean"].get<double>() ==
          Approx(line["val/reverse/tool/calls/mean"].get<double>()));
    CHECK(line["val/reverse/tool/reward/mean"].get<double>() == 0.0);
    CHECK(line["val/reverse/tool/appended_tokens/mean"].get<double>() > 0);
  }
  CHECK(val_lines == 2);  // before training and at step 2
  // ppo eval prints the same under its table.
  r = run_ppo("eval" + never_done.substr(std::string("train").size()) +
              "rollout.multi_turn.max_turns=2 rollout.val_temperature=1");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Contains("tool use: ") && Contains(" answered calls a trajectory, "));

  const std::string done = multi_turn_args(
      dir, "    print(json.dumps({'output': 'x', 'done': True, 'reward': 0.5}), flush=True)\n", "done.py");
  r = run_ppo(done +
              "trainer.total_training_steps=1 trainer.val_before_train=false trainer.output_dir=" + dir.sub("done"));
  REQUIRE(r.status == 0);
  const auto step = ppo::read_jsonl(dir.sub("done/metrics.jsonl")).back();
  CHECK(step["tool/turns/mean"] == 1.0);  // done after the first call, or no call at all
  CHECK(step["tool/appended_tokens/mean"] == 0.0);
  CHECK(step["tool/call_ratio"].get<double>() > 0);
  CHECK(step["tool/reward/mean"].get<double>() == Approx(0.5 * step["tool/call_ratio"].get<double>()));
}

TEST_CASE("a failing environment program stops the run with one error naming it and the call, earlier steps kept",
          "[cpu][cli][multi_turn]") {
  ppo_test::TempDir dir("ppo_multi_turn_errors");
  // Each fails on the calls of the second step's trajectories (ids "1-<prompt>-<response>"), after answering the rest.
  const std::string answer = "    print(json.dumps({'output': 'ok'}), flush=True)\n";
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"    if r['id'].startswith('1-'):\n        sys.exit(4)\n" + answer,
       {"exited with status 4 before answering the call of trajectory 1-"}},
      {"    if r['id'].startswith('1-'):\n        time.sleep(30)\n" + answer,
       {"no answer to the call of trajectory 1-", "rollout.multi_turn.environment.timeout_s=1"}},
      {"    if r['id'].startswith('1-'):\n        print('oops', flush=True)\n        continue\n" + answer,
       {"bad answer to the call of trajectory 1-", "not JSON: 'oops'"}},
  };
  int i = 0;
  for (const auto& [body, expected] : cases) {
    const std::string run = dir.sub("run" + std::to_string(i));
    Result r = run_ppo(multi_turn_args(dir, body, "env" + std::to_string(i++) + ".py") +
                           "rollout.multi_turn.environment.timeout_s=1 trainer.total_training_steps=3 "
                           "trainer.val_before_train=false trainer.save_freq=1 trainer.output_dir=" +
                           run,
                       120);
    INFO(r.output);
    ppo_test::check_one_error(r, "rollout.multi_turn.environment.command 'python3 ");
    for (const std::string& e : expected) CHECK_THAT(r.output, Contains(e));
    CHECK_THAT(r.output, Contains("(sample "));
    CHECK(ppo::read_jsonl(run + "/metrics.jsonl").size() == 1);  // step 1, whole
    CHECK(std::filesystem::exists(run + "/checkpoints/global_step_1"));
  }
  // Settings that cannot work stop before any model is built.
  const std::string base = "train --config " + ppo_test::paths().source_dir +
                           "/configs/regression_tiny.yaml trainer.output_dir=" + dir.sub("bad") +
                           " rollout.multi_turn.enable=true ";
  ppo_test::check_one_error(run_ppo(base), "rollout.multi_turn.environment.command");
  ppo_test::check_one_error(run_ppo(base + "rollout.multi_turn.environment.command=cat rollout.multi_turn.max_turns=0"),
                            "rollout.multi_turn.max_turns must be >= 1");
  ppo_test::check_one_error(
      run_ppo(base + "rollout.multi_turn.environment.command=cat rollout.multi_turn.environment.timeout_s=0"),
      "rollout.multi_turn.environment.timeout_s");
}
