// Rollout ranks and trainer ranks (parallel.rollout_ranks, async.max_staleness): the same numbers as colocated ranks
// and as 1 rank, one step off-policy with an exact resume, bad role counts, a rollout rank killed or stopped mid-run,
// and the roles in `ppo plan`.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/config.h"
#include "common/files.h"
#include "common/manifest.h"
#include "model/safetensors.h"
#include "tests/app/run_ppo.h"
#include "tests/paths.h"
#include "tests/processes.h"
#include "tests/same_runs.h"
#include "tests/temp_dir.h"
#include "tests/text_file.h"
#include "tests/usage_error.h"
#include "train/config_check.h"

namespace fs = std::filesystem;
using nlohmann::json;
using ppo_test::check_roles_equal;
using ppo_test::metrics;
using ppo_test::Run;
using ppo_test::train;

namespace {

// Two mini-batches per step, so the trainers' dispatch blocks matter; validation at step 3 (on the rollout ranks).
const std::string kTwoMiniBatches =
    "actor.ppo_micro_batch_size_per_gpu=4 critic.ppo_micro_batch_size_per_gpu=4 trainer.test_freq=3 ";

}  // namespace

TEST_CASE("rollout ranks at max_staleness 0 equal colocated ranks and 1 rank, with GAE and a critic, and with GRPO",
          "[mpi][roles]") {
  ppo_test::TempDir tmp;
  // 1 rollout rank + 2 trainers, 2 colocated ranks, 2 + 2.
  check_roles_equal(tmp.sub("gae"), kTwoMiniBatches, {{2, 0}, {3, 1}, {4, 2}});
  check_roles_equal(tmp.sub("grpo"), kTwoMiniBatches + "algorithm.adv_estimator=grpo", {{3, 1}});
}

TEST_CASE("rollout ranks with each ZeRO stage among the trainers, and with LoRA, equal 1 rank", "[mpi][roles]") {
  ppo_test::TempDir tmp;
  for (const char* stage : {"1", "2", "3"})
    check_roles_equal(tmp.sub(std::string("zero") + stage), kTwoMiniBatches + "parallel.zero_stage=" + stage, {{3, 1}});
  // LoRA sends only the adapters: far fewer bytes than the whole policy.
  check_roles_equal(tmp.sub("lora"), kTwoMiniBatches + "actor.lora.rank=4 actor.lora.alpha=8 actor.use_kl_loss=true",
                    {{3, 1}});
  const double whole = metrics(tmp.sub("zero3_3_1"))[0]["comm/weight_sync_sent_mib"].get<double>(),
               adapters = metrics(tmp.sub("lora_3_1"))[0]["comm/weight_sync_sent_mib"].get<double>();
  CHECK(adapters < whole / 4);
}

TEST_CASE("one step off-policy: batches lag one version, and a resume with a batch in flight equals the run through",
          "[mpi][roles]") {
  ppo_test::TempDir tmp;
  const std::string cfg = "parallel.rollout_ranks=1 async.max_staleness=1 trainer.total_training_steps=4 ";
  const std::string full = tmp.sub("full"), split = tmp.sub("split");
  Run r = train(3, full, cfg);
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto lines = metrics(full);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0]["async/staleness"] == 0);  // the first batch comes from the initial weights
  for (size_t i = 1; i < 4; ++i) CHECK(lines[i]["async/staleness"] == 1);
  // The same run checkpointing every 2 steps, resumed from step 2: step 2's checkpoint holds batch 3, generated before
  // it; the resume trains on it and generates batch 4 from step 2's weights, as the full run did.
  ppo_test::check_resume_equal(3, full, split, cfg);
  CHECK(fs::exists(split + "/checkpoints/global_step_2/rollout_batch.safetensors"));
}

TEST_CASE("routing replay on rollout ranks: the routing travels with the batch, equals 1 rank, and resumes in flight",
          "[mpi][roles][moe]") {
  ppo_test::TempDir tmp;
  // A Mixtral-shaped policy (4 experts, top-2) whose forwards replay the rollout's routing; GRPO (no critic).
  const std::string moe =
      "model.model_type=mixtral model.moe.num_experts=4 model.moe.num_experts_per_tok=2 actor.router_replay=R3 "
      "algorithm.adv_estimator=grpo ";
  check_roles_equal(tmp.sub("r3"), kTwoMiniBatches + moe, {{3, 1}});
  for (const auto& line : metrics(tmp.sub("r3_3_1"))) CHECK(line["moe/routing_mismatch"].get<double>() <= 0.01);
  // One step off-policy the old policy's routers are a step newer than the rollout's; the batch in flight keeps its
  // routing through a checkpoint.
  const std::string cfg = moe + "parallel.rollout_ranks=1 async.max_staleness=1 trainer.total_training_steps=4 ";
  const std::string full = tmp.sub("full"), split = tmp.sub("split");
  Run r = train(3, full, cfg);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(metrics(full).back().contains("moe/routing_mismatch"));
  ppo_test::check_resume_equal(3, full, split, cfg);
}

TEST_CASE("one step off-policy: a run extended past its last step trains as the longer run straight through",
          "[mpi][roles]") {
  ppo_test::TempDir tmp;
  const std::string cfg = "parallel.rollout_ranks=1 async.max_staleness=1 ";
  const std::string full = tmp.sub("full"), extended = tmp.sub("extended");
  REQUIRE(train(3, full, cfg + "trainer.total_training_steps=4").status == 0);
  REQUIRE(train(3, extended, cfg + "trainer.total_training_steps=2").status == 0);
  // The last step's checkpoint holds the batch of step 3, generated from step 1's weights during step 2.
  CHECK(fs::exists(extended + "/checkpoints/global_step_2/rollout_batch.safetensors"));
  Run r = ppo_test::resume(3, extended, cfg + "trainer.total_training_steps=4");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(metrics(extended)[2]["async/staleness"] == 1);
  ppo_test::check_steps_equal(full, extended, 3, 4);
}

TEST_CASE("a checkpoint's batch in flight is verified and read field by field: exit 2 naming the file and field",
          "[mpi][roles]") {
  ppo_test::TempDir tmp;
  const std::string cfg = "parallel.rollout_ranks=1 async.max_staleness=1 trainer.save_freq=1 ";
  const std::string base = tmp.sub("base"), batch = "/checkpoints/global_step_2/rollout_batch.safetensors";
  REQUIRE(train(3, base, cfg + "trainer.total_training_steps=2").status == 0);
  // Each case: a copy of the run with its step-2 batch changed, resumed for a third step.
  auto attempt = [&](const std::string& name, const std::function<void(const std::string&)>& change,
                     const std::string& expected) {
    const std::string dir = tmp.sub(name);
    fs::copy(base, dir, fs::copy_options::recursive);
    change(dir);
    const std::string before = ppo_test::read_text(dir + "/metrics.jsonl");
    Run r = ppo_test::resume(3, dir, cfg + "trainer.total_training_steps=3");
    INFO(name);
    ppo_test::check_one_error({r.status, r.output}, expected);
    CHECK_THAT(r.output, Catch::Contains("rollout_batch.safetensors"));
    CHECK(ppo_test::read_text(dir + "/metrics.jsonl") == before);  // nothing written is changed
  };
  // Another step's batch, or none: the manifest tells.
  attempt(
      "other_step",
      [&](const std::string& d) {
        fs::copy_file(d + "/checkpoints/global_step_1/rollout_batch.safetensors", d + batch,
                      fs::copy_options::overwrite_existing);
      },
      "is damaged");
  attempt(
      "deleted", [&](const std::string& d) { fs::remove(d + batch); }, "is missing");
  // Changed, with the manifest written again: each field and the description are read.
  using Fields = std::map<std::string, torch::Tensor>;
  auto rewrite = [&](const std::function<void(Fields&, json&)>& edit) {
    return [edit, batch](const std::string& d) {
      json metadata;
      Fields fields = ppo::load_safetensors(d + batch, &metadata);
      json delivery = json::parse(metadata["delivery"].get<std::string>());
      edit(fields, delivery);
      ppo::save_safetensors(d + batch, fields, {{"delivery", delivery.dump()}});
      ppo::write_manifest(d + "/checkpoints/global_step_2");
    };
  };
  attempt("no_scores", rewrite([](Fields& f, json&) { f.erase("scores"); }), "field 'scores' is missing");
  attempt("float_ids", rewrite([](Fields& f, json&) { f["responses"] = f["responses"].to(torch::kFloat32); }),
          "field 'responses' has dtype Float, expected int64");
  attempt("rows", rewrite([](Fields& f, json&) { f["scores"] = f["scores"].slice(0, 0, 8).clone(); }),
          "field 'scores' has shape [8], expected [64]");
  attempt("extra", rewrite([](Fields& f, json&) { f["values"] = torch::zeros_like(f["scores"]); }),
          "field 'values' is not one a rollout delivers");
  attempt("version", rewrite([](Fields&, json& d) { d["policy_version"] = 0; }),
          "'policy_version' is 0, but the batch in flight at step 2 comes from the weights of step 1");
  attempt("sampler", rewrite([](Fields&, json& d) { d["gen_batches"] = 7; }), "'gen_batches' is 7");
  attempt("metrics", rewrite([](Fields&, json& d) { d["metrics"]["critic/score/mean"] = "high"; }),
          "metric 'critic/score/mean' must be a number");
}

TEST_CASE("metrics that are NaN or infinite cross between the roles and through a checkpoint as what they are",
          "[mpi][roles]") {
  // A reward program that gives no accuracy (the accuracy means are NaN) and an extra field whose validation sum
  // overflows to inf.
  ppo_test::TempDir tmp;
  const std::string program = tmp.sub("reward.py");
  ppo_test::write_text(program,
                       "import sys\nfor line in sys.stdin:\n    print('{\"score\": 0.5, \"big\": 1e308}', "
                       "flush=True)\n");
  const std::string cfg =
      "parallel.rollout_ranks=1 async.max_staleness=1 trainer.total_training_steps=4 "
      "trainer.test_freq=2 reward.command='python3 " +
      program + "' ";
  const std::string full = tmp.sub("full");
  Run r = train(3, full, cfg);
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto lines = metrics(full);
  REQUIRE(lines.size() == 4);
  for (const auto& line : lines) {
    CHECK(line["critic/score/mean"] == 0.5);
    CHECK(line["critic/acc/mean"].is_null());  // metrics.jsonl writes a non-finite value as null
  }
  CHECK(lines[1]["val/reverse/score/mean"] == 0.5);
  CHECK(lines[1]["val/reverse/big/mean"].is_null());
  // The batch in flight in step 2's checkpoint carries the NaN metrics; the resume equals the run through.
  ppo_test::check_resume_equal(3, full, tmp.sub("split"), cfg);
}

TEST_CASE("parallel.rollout_ranks that leaves a role empty, and max_staleness without rollout ranks, are errors",
          "[cpu][roles][config]") {
  ppo::Config c =
      ppo::load_config({ppo_test::paths().source_dir + "/configs/regression_tiny.yaml"}, {"parallel.rollout_ranks=2"});
  const std::string no_trainer = ppo_test::usage_error_message([&] { ppo::check_config(c, 2); });
  CHECK_THAT(no_trainer, Catch::Contains("parallel.rollout_ranks=2 leaves no trainer rank of the 2 rank(s)"));
  CHECK_NOTHROW(ppo::check_config(c, 2, ppo::RunMode::generation));  // eval and generate run every rank alike
  c.parallel.rollout_ranks = 1;
  c.data.train_batch_size = 3;
  c.actor.ppo_mini_batch_size = 3;
  c.critic.ppo_mini_batch_size = 3;
  const std::string trainers = ppo_test::usage_error_message([&] { ppo::check_config(c, 3); });
  CHECK_THAT(trainers, Catch::Contains("over 2 ranks"));
  CHECK_THAT(trainers, Catch::Contains("the trainer ranks: the job's 3 less parallel.rollout_ranks=1"));
  c.parallel.rollout_ranks = 0;
  c.data.train_batch_size = 16;
  c.actor.ppo_mini_batch_size = 16;
  c.critic.ppo_mini_batch_size = 16;
  c.async.max_staleness = 1;
  CHECK_THAT(ppo_test::usage_error_message([&] { ppo::check_config(c, 2); }),
             Catch::Contains("async.max_staleness=1 needs parallel.rollout_ranks >= 1"));
}

TEST_CASE("a bad parallel.rollout_ranks on the command line is one error line and exit status 2", "[mpi][roles]") {
  ppo_test::TempDir tmp;
  for (const auto& [ranks, k] : {std::pair{0, 1}, std::pair{2, 2}}) {
    Run r = train(ranks, tmp.sub("bad" + std::to_string(ranks)), "parallel.rollout_ranks=" + std::to_string(k));
    INFO(r.output);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Catch::Contains("error: ") && Catch::Contains("leaves no trainer rank"));
  }
}

TEST_CASE("a rollout rank killed or stopped mid-run ends the job, and its checkpoints resume", "[mpi][roles]") {
  ppo_test::TempDir tmp;
  for (const int signal : {SIGKILL, SIGSTOP}) {
    const std::string dir = tmp.sub("signal" + std::to_string(signal)), marker = "trainer.output_dir=" + dir;
    ppo::remove_tree(dir);
    const std::string cfg = ppo_test::paths().source_dir + "/configs/regression_tiny.yaml " + marker +
                            " trainer.test_freq=0 trainer.val_before_train=false trainer.num_threads=1 "
                            "parallel.timeout_s=10 parallel.rollout_ranks=1 async.max_staleness=1 trainer.save_freq=1";
    auto job = std::async(std::launch::async, [&] {
      return ppo_test::run("timeout -k 5 90 " + ppo_test::mpirun(3) + ppo_test::paths().ppo_binary +
                           " train --config " + cfg);
    });
    // Once step 2's checkpoint is written, rank 2 (the rollout rank) is killed or stopped.
    std::vector<pid_t> rollout;
    for (int i = 0; i < 600 && job.wait_for(std::chrono::milliseconds(100)) == std::future_status::timeout; ++i) {
      rollout = ppo_test::processes_with(marker, 2);
      if (fs::exists(dir + "/checkpoints/global_step_2/manifest.json") && rollout.size() == 1) break;
    }
    REQUIRE(rollout.size() == 1);
    REQUIRE(kill(rollout[0], signal) == 0);
    const auto signalled = std::chrono::steady_clock::now();
    Run r = job.get();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
    const std::vector<pid_t> left = ppo_test::processes_with(marker);
    for (pid_t pid : left) kill(pid, SIGKILL);
    INFO(r.output);
    CHECK(r.status != 0);
    CHECK(left.empty());
    if (signal == SIGSTOP) {  // the trainers' watchdog: parallel.timeout_s and a few seconds
      CHECK_THAT(r.output, Catch::Contains("waited 1") && Catch::Contains("s for the other ranks"));
      CHECK(seconds < 30);
    } else {  // mpirun sees the rank die
      CHECK(seconds < 10);
    }
    // The last checkpoint written resumes: two more steps from it.
    const int64_t latest = std::stoll(ppo_test::read_text(dir + "/checkpoints/latest_checkpointed_iteration.txt"));
    REQUIRE(latest >= 2);
    Run resumed = ppo_test::run(ppo_test::mpirun(3) + ppo_test::paths().ppo_binary + " train --config " + cfg +
                                " trainer.total_training_steps=" + std::to_string(latest + 2));
    INFO(resumed.output);
    CHECK(resumed.status == 0);
    CHECK_THAT(resumed.output, Catch::Contains("resumed from"));
  }
}

TEST_CASE("ppo plan and ppo config show the roles", "[cpu][roles][plan]") {
  const std::string tiny = "--config " + ppo_test::paths().source_dir + "/configs/regression_tiny.yaml ";
  const ppo_test::Result plan = ppo_test::run_ppo("plan " + tiny + "--world-size 3 parallel.rollout_ranks=1", 60);
  INFO(plan.output);
  CHECK(plan.status == 0);
  CHECK_THAT(plan.output, Catch::Contains("rollout ranks (parallel.rollout_ranks=1; the plan above is the 2 trainer "
                                          "ranks')"));
  CHECK_THAT(plan.output, Catch::Contains("\nweight_sync ") && Catch::Contains("\ngen "));
  CHECK_THAT(plan.output, Catch::Contains("rollout ranks' peak: "));
}
