// scripts/ppo_elastic.sh, the job that restarts itself: a rank killed mid-run, and the job started again from its last
// checkpoint on the same ranks (the run straight through's numbers) or on fewer (within the N-ranks tolerance), with
// each restart in the run folder and the metrics; and the launcher's own bad input.
#include <catch2/catch.hpp>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/files.h"
#include "tests/paths.h"
#include "tests/same_runs.h"
#include "tests/temp_dir.h"
#include "tests/text_file.h"

namespace fs = std::filesystem;
using ppo_test::metrics;
using ppo_test::Run;

namespace {

// Three steps of the tiny config, a checkpoint after each; rank 1 kills itself (SIGKILL) as step 2 begins in the
// launcher's first attempt.
const std::string kRun =
    " --config " + ppo_test::paths().source_dir +
    "/configs/regression_tiny.yaml trainer.total_training_steps=3 trainer.save_freq=1 trainer.test_freq=0"
    " trainer.val_before_train=false trainer.num_threads=1 model.attn_implementation=eager";

std::string launcher(const std::string& options, const std::string& dir) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PPO_KILL_RANK=1 PPO_KILL_STEP=2 bash " +
         ppo_test::paths().source_dir + "/scripts/ppo_elastic.sh --binary " + ppo_test::paths().ppo_binary +
         " --mpirun-args '--oversubscribe --bind-to none' --max-restarts 2 " + options + " -- " + kRun +
         " trainer.output_dir=" + dir;
}

// The restarts the run folder records, one JSON object each.
std::vector<nlohmann::json> restarts(const std::string& dir) {
  return ppo::read_jsonl(dir + "/restarts.jsonl");
}

}  // namespace

TEST_CASE("ppo_elastic: a rank killed mid-run, the job restarted on the same ranks equals the run straight through",
          "[mpi][elastic]") {
  ppo_test::TempDir tmp;
  const std::string full = tmp.sub("full"), dir = tmp.sub("restarted");
  REQUIRE(ppo_test::train(2, full, "trainer.save_freq=1").status == 0);
  Run r = ppo_test::run(launcher("--np 2 --delay 0", dir));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("ppo_elastic: the job ended with status") &&
                           Catch::Contains("ppo_elastic: restart 1 of 2 on 2 rank(s)") &&
                           Catch::Contains("resumed from"));
  ppo_test::check_steps_equal(full, dir, 1, 3);
  const auto lines = metrics(dir);
  CHECK(lines[0]["elastic/restarts"] == 0);  // written by the first attempt
  CHECK(lines[1]["elastic/restarts"] == 1);  // step 2 on, by the restarted job
  CHECK(lines[2]["elastic/restarts"] == 1);
  const auto logged = restarts(dir);
  REQUIRE(logged.size() == 1);
  CHECK(logged[0]["restart"] == 1);
  CHECK(logged[0]["resumed_at_step"] == 1);
  CHECK(logged[0]["ranks"] == 2);
  CHECK(logged[0]["previous_exit"] != "0");
}

TEST_CASE("ppo_elastic: a host that is gone at the restart, the job goes on with fewer ranks", "[mpi][elastic]") {
  ppo_test::TempDir tmp;
  const std::string full = tmp.sub("full"), dir = tmp.sub("fewer"), hosts = tmp.sub("hosts");
  REQUIRE(ppo_test::train(2, full, "trainer.save_freq=1").status == 0);
  ppo_test::write_text(hosts, "localhost slots=2\n");
  auto job = std::async(std::launch::async,
                        [&] { return ppo_test::run(launcher("--hostfile " + hosts + " --delay 3", dir)); });
  // Once step 1's checkpoint is written (rank 1 kills itself at step 2, then the launcher waits 3 s), one slot of the
  // hostfile is gone.
  for (int i = 0; i < 600 && !fs::exists(dir + "/checkpoints/global_step_1/manifest.json"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ppo_test::write_text(hosts, "localhost slots=1\n");
  Run r = job.get();
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("ppo_elastic: restart 1 of 2 on 1 rank(s)"));
  ppo_test::check_same(full, dir, ppo_test::kRankTolerance);
  const auto logged = restarts(dir);
  REQUIRE(logged.size() == 1);
  CHECK(logged[0]["ranks"] == 1);
}

TEST_CASE("ppo_elastic: bad input ends it at once, and a job that keeps failing gives up after --max-restarts",
          "[mpi][elastic]") {
  ppo_test::TempDir tmp;
  const std::string script = "bash " + ppo_test::paths().source_dir + "/scripts/ppo_elastic.sh ";
  for (const auto& [args, expected] : std::vector<std::pair<std::string, std::string>>{
           {"--np x -- a", "--np must be a whole number"},
           {"--np 2", "no ppo train arguments after --"},
           {"--hostfile " + tmp.sub("none") + " -- a", "--hostfile " + tmp.sub("none") + " cannot be read"},
           {"--frobnicate -- a", "unknown option '--frobnicate'"}}) {
    Run r = ppo_test::run(script + args);
    INFO(r.output);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Catch::Contains("error: ppo_elastic: " + expected));
  }
  // A bad config: the binary's exit status 2, passed on without a restart.
  Run bad = ppo_test::run(launcher("--np 1 --delay 0", tmp.sub("bad")) + " data.seed=x");
  INFO(bad.output);
  CHECK(bad.status == 2);
  CHECK_THAT(bad.output, !Catch::Contains("restart 1"));
  // A rank that fails at every attempt: the first attempt and two restarts, then the launcher gives up.
  Run failing = ppo_test::run("PPO_FAULT_RANK=0 " + launcher("--np 1 --delay 0", tmp.sub("failing")));
  INFO(failing.output);
  CHECK(failing.status != 0);
  CHECK_THAT(failing.output,
             Catch::Contains("restart 2 of 2") && Catch::Contains("error: ppo_elastic: the job failed 3 times"));
  CHECK(restarts(tmp.sub("failing")).size() == 2);
}
