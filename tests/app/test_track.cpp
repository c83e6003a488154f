// The experiment trackers (trainer.logger wandb and mlflow, `ppo track`; records/tracker.h): the tracked runs read
// back through the trackers' own readers (tests/reference/track_check.py: MLflow's get_metric_history, W&B's reader
// of offline run files) equal metrics.jsonl, every key and step; a tracker that fails or is killed leaves training as
// it was; a job killed with SIGKILL and resumed gives one tracked run. Offline: an MLflow file store and
// WANDB_MODE=offline in a TempDir, so nothing leaves the machine.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/files.h"
#include "common/json.h"
#include "common/strings.h"
#include "tests/app/run_ppo.h"
#include "tests/paths.h"
#include "tests/same_runs.h"
#include "tests/temp_dir.h"

namespace {

using ppo_test::Result;
using ppo_test::run_ppo;
namespace fs = std::filesystem;

// The tracking environment install-deps makes; the tests need it.
std::string track_python() {
  const std::string python = ppo_test::paths().source_dir + "/.venv-track/bin/python";
  if (!fs::exists(python)) FAIL(python + " is missing: bash scripts/install-deps.sh makes the tracking environment");
  return python;
}

// Both trackers offline, in `tmp`.
std::string offline_env(const std::string& tmp) {
  return "MLFLOW_TRACKING_URI=file:" + tmp + "/mlruns WANDB_MODE=offline WANDB_DIR=" + tmp + " WANDB_SILENT=true";
}

// 4 PPO steps of the tiny config into `dir`, validating at steps 2 and 4 (and before training).
Result tiny_run(const std::string& dir, const std::string& extra, const std::string& env) {
  return run_ppo("train --config " + ppo_test::paths().source_dir +
                     "/configs/regression_tiny.yaml trainer.output_dir=" + dir +
                     " trainer.total_training_steps=4 trainer.test_freq=2 trainer.num_threads=1 " + extra,
                 300, "", env);
}

// Waits (up to 60 s) until the companion of `tracker` has closed its run; returns how the run ended.
std::string closed(const std::string& dir, const std::string& tracker) {
  const std::string file = dir + "/tracking/" + tracker + ".closed";
  for (int i = 0; i < 600; ++i) {
    if (fs::exists(file)) return ppo::trim(ppo::read_regular_file(file));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return "still open after 60 s";
}

// A companion's log, for a failure's message.
std::string log_of(const std::string& dir, const std::string& tracker) {
  const std::string log = dir + "/tracking/" + tracker + ".log";
  return fs::exists(log) ? ppo::read_regular_file(log) : "(no " + log + ")";
}

// The tracked run of `tracker` read back and compared with metrics.jsonl; `flags`: track_check.py's own.
Result check_tracked(const std::string& tmp, const std::string& dir, const std::string& tracker,
                     const std::string& flags = "") {
  const std::string args = flags + " " + tracker + " " + dir + (tracker == "wandb" ? " " + tmp : "");
  ppo_test::Run r = ppo_test::run("env " + offline_env(tmp) + " " + track_python() + " " +
                                  ppo_test::paths().source_dir + "/tests/reference/track_check.py " + args);
  return {r.status, r.output};
}

}  // namespace

TEST_CASE("trainer.logger wandb and mlflow: the tracked runs hold every metric of metrics.jsonl", "[cpu][track]") {
  ppo_test::TempDir tmp;
  const std::string dir = tmp.sub("run");
  const Result r = tiny_run(dir, "trainer.logger=[console,mlflow,wandb]", offline_env(tmp.path.string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, !Catch::Contains("warning: trainer.logger"));
  CHECK(ppo::read_jsonl(dir + "/metrics.jsonl").size() == 5);  // written for the trackers, not asked for
  for (const std::string tracker : {"mlflow", "wandb"}) {
    INFO(tracker << " log:\n" << log_of(dir, tracker));
    CHECK(closed(dir, tracker) == "finished");
    const Result check = check_tracked(tmp.path.string(), dir, tracker);
    INFO(check.output);
    CHECK(check.status == 0);
    CHECK_THAT(check.output, Catch::Contains(" 0 differ") && !Catch::Contains(" 0 values compared"));
  }
}

TEST_CASE("a tracker that cannot start or is killed mid-run leaves training as it was", "[cpu][track]") {
  ppo_test::TempDir tmp;
  REQUIRE(tiny_run(tmp.sub("plain"), "trainer.logger=[jsonl]", "").status == 0);
  // A companion that exits at once with an error: one warning, the run goes on.
  const Result failed = tiny_run(tmp.sub("failed"), "trainer.logger=[jsonl,mlflow]", "PPO_TRACK_PYTHON=false");
  INFO(failed.output);
  REQUIRE(failed.status == 0);
  CHECK(ppo_test::count_lines(failed.output, "warning: trainer.logger mlflow: the tracker stopped") == 1);
  ppo_test::check_steps_equal(tmp.sub("plain"), tmp.sub("failed"), 1, 5);
  // A companion killed (SIGKILL) while the run goes on.
  const std::string wrapper = tmp.sub("killed_python.sh");
  ppo::write_file_atomic(wrapper, "#!/bin/sh\n" + track_python() + " \"$@\" &\nsleep 1\nkill -9 $!\nexit 137\n");
  fs::permissions(wrapper, fs::perms::owner_all);
  const Result killed = tiny_run(tmp.sub("killed"), "trainer.logger=[jsonl,wandb]",
                                 offline_env(tmp.path.string()) + " PPO_TRACK_PYTHON=" + wrapper);
  INFO(killed.output);
  REQUIRE(killed.status == 0);
  ppo_test::check_steps_equal(tmp.sub("plain"), tmp.sub("killed"), 1, 5);
}

TEST_CASE("a job killed with SIGKILL and resumed continues one tracked run, each step once", "[cpu][track]") {
  ppo_test::TempDir tmp;
  const std::string dir = tmp.sub("run");
  const std::string env = offline_env(tmp.path.string());
  const std::string cfg = "trainer.logger=[console,mlflow,wandb] trainer.save_freq=2";
  const Result cut = tiny_run(dir, cfg, env + " PPO_KILL_RANK=0 PPO_KILL_STEP=4");
  INFO(cut.output);
  REQUIRE(cut.status != 0);  // killed at step 4, after step 2's checkpoint
  for (const std::string tracker : {"mlflow", "wandb"}) CHECK(closed(dir, tracker) == "killed");
  const Result resumed = tiny_run(dir, cfg, env);
  INFO(resumed.output);
  REQUIRE(resumed.status == 0);
  CHECK_THAT(resumed.output, Catch::Contains("resumed from"));
  // Step 3 ran twice (before the kill, and again from step 2's checkpoint): the tracker keeps the first, equal to
  // the second but for its timings (ppo.cpp resumes exactly), which the comparison leaves out.
  for (const std::string tracker : {"mlflow", "wandb"}) {
    INFO(tracker << " log:\n" << log_of(dir, tracker));
    CHECK(closed(dir, tracker) == "finished");
    const Result check = check_tracked(tmp.path.string(), dir, tracker, "--except-timings");
    INFO(check.output);
    CHECK(check.status == 0);
    CHECK_THAT(check.output, Catch::Contains(" 0 differ"));
  }
  CHECK_THAT(check_tracked(tmp.path.string(), dir, "wandb", "--except-timings").output,
             Catch::Contains("2 offline part(s)"));
}

TEST_CASE("ppo track logs a finished run later, and refuses bad input with one error line", "[cpu][track]") {
  ppo_test::TempDir tmp;
  const std::string dir = tmp.sub("run");
  REQUIRE(tiny_run(dir, "trainer.logger=[jsonl]", "").status == 0);
  for (const std::string tracker : {"mlflow", "wandb"}) {
    const Result r = run_ppo("track --to " + tracker + " " + dir, 120, "",
                             offline_env(tmp.path.string()) + " PPO_TRACK_PYTHON=" + track_python());
    INFO(r.output);
    REQUIRE(r.status == 0);
    const Result check = check_tracked(tmp.path.string(), dir, tracker);
    INFO(check.output);
    CHECK(check.status == 0);
    CHECK_THAT(check.output, Catch::Contains(" 0 differ"));
  }
  ppo_test::check_one_error(run_ppo("track --to neptune " + dir), "--to neptune: valid: wandb, mlflow");
  ppo_test::check_one_error(run_ppo("track --to mlflow " + tmp.sub("nothing")), "metrics.jsonl not found");
  ppo_test::check_one_error(run_ppo("track " + dir), "ppo track needs --to");
  ppo_test::check_one_error(
      run_ppo("train " + ppo_test::kTinyOneThread + "trainer.logger=[jsonl,neptune]"),
      "trainer.logger: unknown value 'neptune'; valid: console, jsonl, tensorboard, wandb, mlflow");
}
