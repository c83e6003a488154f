// Data parallelism through the real command under mpirun: N ranks compute what one rank does.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "common/config.h"
#include "common/files.h"
#include "common/jsonl.h"
#include "model/weights.h"
#include "parallel/dispatch.h"
#include "parallel/threads.h"
#include "tests/paths.h"
#include "tests/processes.h"
#include "tests/same_runs.h"
#include "tests/temp_dir.h"
#include "tests/text_file.h"
#include "workers/actor.h"
#include "workers/optimizer.h"

namespace fs = std::filesystem;
using ppo_test::check_same;
using ppo_test::kRankTolerance;
using ppo_test::metrics;
using ppo_test::mpirun;
using ppo_test::processes_with;
using ppo_test::run;
using ppo_test::Run;
using ppo_test::train;

namespace {

// 3 steps with `cfg` on 1 rank into tmp/<name>_1 and on 2 ranks into tmp/<name>_2: both run, and compute the same.
// Returns the 2-rank run's folder.
std::string one_equals_two(const ppo_test::TempDir& tmp, const std::string& name, const std::string& cfg) {
  const std::string one = tmp.sub(name + "_1"), two = tmp.sub(name + "_2");
  Run r1 = train(0, one, cfg);
  INFO(r1.output);
  REQUIRE(r1.status == 0);
  Run r2 = train(2, two, cfg);
  INFO(r2.output);
  REQUIRE(r2.status == 0);
  check_same(one, two, kRankTolerance);
  return two;
}

}  // namespace

TEST_CASE("dispatch: blocks split equally over ranks, padding marked", "[cpu][dispatch]") {
  CHECK(ppo::dispatch_positions(8, 8, 2, 1, false) == std::vector<int64_t>{4, 5, 6, 7});
  // Two mini-batches of 4: rank 1 gets the second half of each, so both mini-batches keep their prompts.
  CHECK(ppo::dispatch_positions(8, 4, 2, 1, false) == std::vector<int64_t>{2, 3, 6, 7});
  // 2 prompts over 4 ranks with padding: ranks 2 and 3 hold masked copies of prompt 0.
  CHECK(ppo::dispatch_positions(2, 2, 4, 0, true) == std::vector<int64_t>{0});
  CHECK(ppo::dispatch_positions(2, 2, 4, 1, true) == std::vector<int64_t>{1});
  CHECK(ppo::dispatch_positions(2, 2, 4, 3, true) == std::vector<int64_t>{-1});
}

TEST_CASE("3 PPO steps on 2 and 4 ranks equal 1 rank with the same global batch", "[mpi]") {
  ppo_test::TempDir tmp;
  const std::string one = tmp.sub("1"), two = tmp.sub("2"), four = tmp.sub("4");
  // Two mini-batches per step, so the dispatcher's mini-batch layout matters too.
  const std::string cfg =
      "actor.ppo_micro_batch_size_per_gpu=4 critic.ppo_micro_batch_size_per_gpu=4 parallel.check_params_freq=1";
  Run r1 = train(0, one, cfg);
  REQUIRE(r1.status == 0);
  Run r2 = train(2, two, cfg);
  INFO(r2.output);
  REQUIRE(r2.status == 0);
  check_same(one, two, kRankTolerance);
  Run r4 = train(4, four, cfg);
  INFO(r4.output);
  REQUIRE(r4.status == 0);
  check_same(one, four, kRankTolerance);
}

TEST_CASE("an external reward program on 2 ranks equals 1 rank, with extra fields that only some ranks answer",
          "[mpi][reward]") {
  // One program per rank. Rank 0's answers carry a field rank 1's lack: the metric names must still agree across
  // ranks (a mismatch would make the reduction add up different metrics), and its mean is over the rows that have it.
  ppo_test::TempDir tmp;
  const std::string program = tmp.sub("reward.py");
  std::ofstream(program) << "import json, os, sys\n"
                            "rank = os.environ['PPO_RANK']\n"
                            "for line in sys.stdin:\n"
                            "    r = json.loads(line)\n"
                            "    given, target = r['response'].strip(), r['ground_truth']['target']\n"
                            "    a = {'score': sum(g == t for g, t in zip(given, target)) / len(target),\n"
                            "         'acc': given == target, 'length': len(given)}\n"
                            "    if rank == '0':\n"
                            "        a['rank0_only'] = 1\n"
                            "        a['only 0: \u00fcn\u00ef/x'] = 2\n"
                            "    else:\n"
                            "        a['rank1:only'] = 3\n"
                            "    print(json.dumps(a), flush=True)\n";
  const std::string two = one_equals_two(tmp, "reward", "reward.command='python3 " + program + "'");
  for (const auto& line : metrics(two)) {  // names of any bytes, a different set on each rank: each mean its own
    CHECK(line["reward/reverse/rank0_only/mean"] == 1.0);
    CHECK(line["reward/reverse/only 0: \u00fcn\u00ef/x/mean"] == 2.0);
    CHECK(line["reward/reverse/rank1:only/mean"] == 3.0);
    CHECK(line["reward/reverse/acc/mean"].get<double>() <= 1.0);
    CHECK(line.contains("reward/reverse/length/mean"));
    CHECK(line["reward/reverse/score/mean"].get<double>() ==
          Approx(line["critic/score/mean"].get<double>()).epsilon(1e-6));  // double vs the float32 batch field
  }
}

TEST_CASE("multi-turn rollouts with a tool environment on 2 ranks, and on a rollout rank, equal 1 rank",
          "[mpi][multi_turn]") {
  // One environment per rank; each answer depends on the call alone, so the trajectories do not depend on the rank.
  ppo_test::TempDir tmp;
  const std::string program = tmp.sub("env.py");
  std::ofstream(program) << "import json, sys\n"
                            "for line in sys.stdin:\n"
                            "    r = json.loads(line)\n"
                            "    print(json.dumps({'output': r['call'][-4:][::-1], 'reward': 0.1 * r['turn']}), "
                            "flush=True)\n";
  const std::string cfg =
      "data.max_response_length=40 model.max_position_embeddings=56 rollout.multi_turn.enable=true "
      "rollout.multi_turn.call_start= rollout.multi_turn.stop= rollout.multi_turn.max_turns=3 "
      "rollout.multi_turn.environment.command='python3 " +
      program + "'";
  const std::string two = one_equals_two(tmp, "tools", cfg);
  double calls = 0;
  for (const auto& line : metrics(two)) calls += line["tool/calls/mean"].get<double>();
  CHECK(calls > 0);
  // The environment runs on the rollout rank only.
  Run roles = train(3, tmp.sub("tools_roles"), cfg + " parallel.rollout_ranks=1");
  INFO(roles.output);
  REQUIRE(roles.status == 0);
  check_same(tmp.sub("tools_1"), tmp.sub("tools_roles"), kRankTolerance);
}

TEST_CASE("train_batch_size=2 on 4 ranks fails before any model is built, and padding makes it run", "[mpi]") {
  ppo_test::TempDir tmp;
  const std::string cfg =
      "data.train_batch_size=2 actor.ppo_mini_batch_size=2 critic.ppo_mini_batch_size=2 rollout.n=1 "
      "actor.ppo_micro_batch_size_per_gpu=1 critic.ppo_micro_batch_size_per_gpu=1";
  Run bad = train(4, tmp.sub("bad"), cfg);
  INFO(bad.output);
  CHECK(bad.status == 2);
  CHECK_THAT(bad.output, Catch::Contains("data.train_batch_size=2 cannot be split into equal chunks over 4 ranks: "
                                         "use a multiple of 4 (4, 8, ...)"));
  CHECK_THAT(bad.output, !Catch::Contains("parameters"));  // no model was built
  Run one = train(0, tmp.sub("pad1"), cfg);
  REQUIRE(one.status == 0);
  Run padded = train(4, tmp.sub("pad4"), cfg + " parallel.pad_to_world=true");
  INFO(padded.output);
  REQUIRE(padded.status == 0);
  check_same(tmp.sub("pad1"), tmp.sub("pad4"), kRankTolerance);
}

TEST_CASE("4 ranks with one prompt each and n=1 match 1 rank with 4 prompts, no NaN", "[mpi]") {
  ppo_test::TempDir tmp;
  const std::string cfg =
      "data.train_batch_size=4 actor.ppo_mini_batch_size=4 critic.ppo_mini_batch_size=4 rollout.n=1 "
      "actor.ppo_micro_batch_size_per_gpu=1 critic.ppo_micro_batch_size_per_gpu=1";
  REQUIRE(train(0, tmp.sub("one1"), cfg).status == 0);
  Run four = train(4, tmp.sub("one4"), cfg);
  INFO(four.output);
  REQUIRE(four.status == 0);
  for (const auto& line : metrics(tmp.sub("one4")))
    for (auto& [key, value] : line.items()) {
      INFO(key);
      CHECK(value.is_number());  // NaN / inf are written as null
    }
  check_same(tmp.sub("one1"), tmp.sub("one4"), kRankTolerance);
}

TEST_CASE("a rank that throws ends the whole job with an error within 30 s", "[mpi]") {
  ppo_test::TempDir tmp;
  Run r =
      run("PPO_FAULT_RANK=1 " + mpirun(2) + "-x PPO_FAULT_RANK " + ppo_test::paths().ppo_binary + " train --config " +
          ppo_test::paths().source_dir + "/configs/regression_tiny.yaml trainer.output_dir=" + tmp.sub("fault"));
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK_THAT(r.output, Catch::Contains("error: [rank 1] injected fault"));
  CHECK(r.seconds < 30);
}

TEST_CASE("a rank stopped by SIGSTOP ends the whole job with a named error within 30 s and no process left", "[mpi]") {
  ppo_test::TempDir tmp;
  const std::string dir = tmp.sub("stopped"), marker = "trainer.output_dir=" + dir;
  ppo::remove_tree(dir);
  // 200 steps, far longer than the test; `timeout` ends the job should the watchdog not.
  auto job = std::async(std::launch::async, [&] {
    return run("timeout -k 5 90 " + mpirun(2) + ppo_test::paths().ppo_binary + " train --config " +
               ppo_test::paths().source_dir + "/configs/regression_tiny.yaml " + marker +
               " trainer.test_freq=0 trainer.val_before_train=false trainer.num_threads=1 parallel.timeout_s=10");
  });
  // Mid-run: once rank 0 has logged a step, rank 1 stops.
  std::vector<pid_t> rank1;
  for (int i = 0; i < 600 && job.wait_for(std::chrono::milliseconds(100)) == std::future_status::timeout; ++i) {
    rank1 = processes_with(marker, 1);
    if (!ppo_test::read_text(dir + "/metrics.jsonl").empty() && rank1.size() == 1) break;
  }
  REQUIRE(rank1.size() == 1);
  REQUIRE(kill(rank1[0], SIGSTOP) == 0);
  const auto stopped = std::chrono::steady_clock::now();
  Run r = job.get();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  const std::vector<pid_t> left = processes_with(marker);
  for (pid_t pid : left) kill(pid, SIGKILL);  // a failed test must not leave a stopped rank behind
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(std::regex_search(r.output, std::regex(R"(error: \[rank 0\] (all_reduce|broadcast|all_gather|barrier) )"
                                               R"(waited 1\d s for the other ranks \(parallel\.timeout_s=10\))")));
  WARN("the job ended " << seconds << " s after rank 1 was stopped");
  CHECK(seconds < 30);
  CHECK(left.empty());  // mpirun ended the stopped rank too (SIGCONT, SIGTERM, then SIGKILL)
}

TEST_CASE("a rank stopped in its first moments (before MPI_Init) ends the job within parallel.timeout_s", "[mpi]") {
  ppo_test::TempDir tmp;
  const std::string dir = tmp.sub("start"), marker = "trainer.output_dir=" + dir;
  // Rank 1's shell stops itself before it starts ppo; the bound comes from the config file and the command line.
  ppo_test::write_text(tmp.sub("timeout.yaml"), "parallel:\n  timeout_s: 4\n");
  const std::string ppo = ppo_test::paths().ppo_binary + " train --config " + ppo_test::paths().source_dir +
                          "/configs/regression_tiny.yaml --config " + tmp.sub("timeout.yaml") + " " + marker;
  const auto start = std::chrono::steady_clock::now();
  Run r = run("timeout -k 5 90 " + mpirun(2) +
              "sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then kill -STOP $$; fi; exec " + ppo + "'");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::vector<pid_t> left = processes_with(marker);
  for (pid_t pid : left) kill(pid, SIGKILL);
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.status != 124);  // not `timeout`'s
  CHECK(std::regex_search(r.output, std::regex(R"(error: \[rank 0\] start-up \(MPI_Init, before any step\) )"
                                               R"(waited \d s for the other ranks \(parallel\.timeout_s=4\))")));
  WARN("the job ended after " << seconds << " s");
  CHECK(seconds < 25);
  CHECK(left.empty());
  CHECK_FALSE(fs::exists(dir));  // nothing was started
}

TEST_CASE("each offload option, and all of them with checkpointing, equal the run without, on 1 and 2 ranks",
          "[mpi][memory]") {
  // A reference model too (use_kl_loss), so ref.offload is exercised. On a CPU-only machine every offload is a real
  // host-to-host copy, so the runs must agree to 1e-6 absolute.
  const std::string cfg =
      "actor.use_kl_loss=true actor.ppo_micro_batch_size_per_gpu=4 critic.ppo_micro_batch_size_per_gpu=4";
  const std::vector<std::string> options = {
      "actor.offload.param=true critic.offload.param=true ref.offload.param=true",
      "actor.offload.grad=true critic.offload.grad=true", "actor.offload.optimizer=true critic.offload.optimizer=true",
      "actor.offload.param=true actor.offload.grad=true actor.offload.optimizer=true critic.offload.param=true "
      "critic.offload.grad=true critic.offload.optimizer=true ref.offload.param=true "
      "model.enable_gradient_checkpointing=true"};
  ppo_test::TempDir tmp;
  for (int ranks : {0, 2}) {
    const std::string base = tmp.sub("offload_base" + std::to_string(ranks));
    Run r = train(ranks, base, cfg);
    INFO(r.output);
    REQUIRE(r.status == 0);
    for (size_t i = 0; i < options.size(); ++i) {
      const std::string dir = tmp.sub("offload" + std::to_string(ranks) + "_" + std::to_string(i));
      Run o = train(ranks, dir, cfg + " " + options[i]);
      INFO(options[i] << "\n" << o.output);
      REQUIRE(o.status == 0);
      // On LibTorch >= 2.4 the base run updates with the fused AdamW kernel and a run with grad or optimizer offload
      // per tensor (workers/optimizer.h): the two agree to float rounding (measured: 1.4e-6 on step 3's largest
      // advantage, 1.2e-7 on the parameters), so there metrics and parameters get 1e-5 relative.
      const double rtol = ppo::fused_adamw_available() ? 1e-5 : 0;
      check_same(base, dir, rtol, /*atol=*/1e-6, /*param_rtol=*/rtol, /*param_outliers=*/0);
    }
  }
}

TEST_CASE("token budgets and generation waves on 1 and 2 ranks equal fixed micro-batches on 1 rank", "[mpi][memory]") {
  ppo_test::TempDir tmp;
  const std::string fixed = "actor.ppo_micro_batch_size_per_gpu=4 critic.ppo_micro_batch_size_per_gpu=4";
  const std::string budget =
      "actor.use_dynamic_bsz=true actor.ppo_max_token_len_per_gpu=120 critic.use_dynamic_bsz=true "
      "critic.ppo_max_token_len_per_gpu=150 rollout.log_prob_use_dynamic_bsz=true "
      "rollout.log_prob_max_token_len_per_gpu=100 rollout.max_kv_tokens=100";
  REQUIRE(train(0, tmp.sub("budget_fixed"), fixed).status == 0);
  Run one = train(0, tmp.sub("budget1"), budget);
  INFO(one.output);
  REQUIRE(one.status == 0);
  CHECK_THAT(one.output, Catch::Contains("micro-batches of <= 120 tokens"));
  CHECK_THAT(one.output, Catch::Contains("rollout: waves of <= 4 sequences"));
  CHECK_THAT(one.output, Catch::Contains("validation: 4 sequences per rank decoded together"));  // the same bound
  check_same(tmp.sub("budget_fixed"), tmp.sub("budget1"), kRankTolerance);
  Run two = train(2, tmp.sub("budget2"), budget);
  INFO(two.output);
  REQUIRE(two.status == 0);
  check_same(tmp.sub("budget_fixed"), tmp.sub("budget2"), kRankTolerance);
}

TEST_CASE("trainer.balance_batch evens out tokens over ranks and still equals 1 rank", "[mpi][memory]") {
  ppo_test::TempDir tmp;
  // Prompts of 1-6 digits and responses up to 12 tokens, so ranks differ in tokens (measured: 1.046 -> 1.004).
  const std::string cfg =
      "actor.ppo_micro_batch_size_per_gpu=4 critic.ppo_micro_batch_size_per_gpu=4 data.min_difficulty=1 "
      "data.max_difficulty=6 data.max_response_length=12";
  REQUIRE(train(0, tmp.sub("balance1"), cfg).status == 0);
  Run two = train(2, tmp.sub("balance2"), cfg + " trainer.balance_batch=true");
  INFO(two.output);
  REQUIRE(two.status == 0);
  check_same(tmp.sub("balance1"), tmp.sub("balance2"), kRankTolerance);
  int improved = 0;
  for (const auto& line : metrics(tmp.sub("balance2"))) {
    double before = line["perf/rank_token_imbalance_before"].get<double>();
    double after = line["perf/rank_token_imbalance_after"].get<double>();
    WARN("max rank tokens / mean: " << before << " before balancing, " << after << " after");
    CHECK(after >= 1.0);
    CHECK(after <= before);
    improved += after < before;
  }
  CHECK(improved >= 1);
}

// (A name with a colon past Catch2's 79 columns sends its header printer into an endless loop.)
TEST_CASE("DAPO dynamic sampling on 2 and 4 ranks and on 2 rollout ranks equals 1 rank (kept groups redistributed)",
          "[mpi]") {
  ppo_test::TempDir tmp;
  // A low temperature makes groups whose responses agree common, so steps take several generation batches and each
  // rank's kept groups differ in number; two mini-batches per step, so the dispatch blocks matter too.
  const std::string cfg =
      "actor.ppo_micro_batch_size_per_gpu=4 critic.ppo_micro_batch_size_per_gpu=4 algorithm.adv_estimator=grpo "
      "algorithm.filter_groups.enable=true algorithm.filter_groups.metric=score rollout.temperature=0.3";
  REQUIRE(train(0, tmp.sub("dapo1"), cfg).status == 0);
  double batches = 0;
  for (const auto& line : metrics(tmp.sub("dapo1"))) batches += line["train/num_gen_batches"].get<double>();
  CHECK(batches > 3);
  for (int ranks : {2, 4, 3}) {  // 3: 2 rollout ranks sample, 1 trainer
    const std::string dir = tmp.sub("dapo" + std::to_string(ranks));
    Run r = train(ranks, dir, cfg + (ranks == 3 ? " parallel.rollout_ranks=2" : ""));
    INFO(r.output);
    REQUIRE(r.status == 0);
    check_same(tmp.sub("dapo1"), dir, kRankTolerance);
  }
}

// scripts/two_hosts.sh run: its run on 2 hosts (network namespaces), PPO_RUN_B, equals its 1-rank run, PPO_RUN_A, as
// above. Hidden ([.]): only the script, which makes the two runs, runs it (ctest: two_hosts_run).
TEST_CASE("the N-rank run in PPO_RUN_B equals the 1-rank run in PPO_RUN_A", "[.same_runs]") {
  const char* one = std::getenv("PPO_RUN_A");
  const char* many = std::getenv("PPO_RUN_B");
  REQUIRE(one != nullptr);
  REQUIRE(many != nullptr);
  check_same(one, many, kRankTolerance);
}

TEST_CASE("trainer.num_threads=0 takes the rank's usable cores, at most its share of the machine", "[cpu][parallel]") {
  const int64_t usable = ppo::usable_cores();
  CHECK(usable >= 1);
  CHECK(usable <= std::max<int64_t>(1, std::thread::hardware_concurrency()));
  CHECK(ppo::default_threads(1, 16, 2) == 1);   // mpirun bound the rank to one core
  CHECK(ppo::default_threads(8, 16, 4) == 4);   // bound to a socket shared by two ranks
  CHECK(ppo::default_threads(16, 16, 4) == 4);  // not bound
  CHECK(ppo::default_threads(2, 16, 1) == 2);   // taskset -c 0,1
  CHECK(ppo::default_threads(2, 2, 4) == 1);    // oversubscribed
  // OMP_NUM_THREADS, when set, comes first.
  CHECK(ppo::omp_num_threads(nullptr, 16) == 0);
  CHECK(ppo::omp_num_threads("", 16) == 0);
  CHECK(ppo::omp_num_threads("4", 16) == 4);
  CHECK(ppo::omp_num_threads("4,2", 16) == 4);  // nested levels: the first
  for (const char* bad : {"0", "17", "-1", "two", "4x", ",4", "99999999999999999999"})
    CHECK(ppo::omp_num_threads(bad, 16) == -1);
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  setenv("OMP_NUM_THREADS", std::to_string(cores).c_str(), 1);
  ppo::Context::get().set_threads(0);
  CHECK(torch::get_num_threads() == cores);
  setenv("OMP_NUM_THREADS", "1", 1);  // as tests/main.cpp sets it
  ppo::Context::get().set_threads(0);
  CHECK(torch::get_num_threads() == 1);
}

TEST_CASE("ranks given different configs or files stop at start-up naming the keys and the ranks", "[mpi]") {
  // MPMD launches (mpirun -np 1 ppo ... : -np 1 ppo ... key=other) once ran to the end with each rank computing
  // something else; different copies of a data file behind the same path (here: each rank in its own folder) too.
  ppo_test::TempDir tmp;
  const std::string ppo = ppo_test::paths().ppo_binary + " train --config " + ppo_test::paths().source_dir +
                          "/configs/regression_tiny.yaml trainer.num_threads=1 "
                          "trainer.total_training_steps=2 trainer.output_dir=" +
                          tmp.sub("run");
  const auto mpmd = [&](const std::string& first, const std::string& second) {
    return run(mpirun(1) + first + " : -np 1 " + second);
  };
  Run lr = mpmd(ppo, ppo + " actor.optim.lr=0.002");
  INFO(lr.output);
  CHECK(lr.status == 2);
  CHECK_THAT(lr.output, Catch::Contains("the ranks of this job were given different configs or files") &&
                            Catch::Contains("actor.optim.lr is 0.001 on rank 0 but 0.002 on rank 1"));
  Run steps = mpmd(ppo, ppo + " trainer.total_training_steps=3");
  INFO(steps.output);
  CHECK(steps.status == 2);
  CHECK_THAT(steps.output, Catch::Contains("trainer.total_training_steps is 2 on rank 0 but 3 on rank 1"));
  for (const char* folder : {"a", "b"}) {
    fs::create_directories(tmp.sub(folder));
    REQUIRE(run(ppo_test::paths().ppo_binary + " data reverse --count 32 --out " + tmp.sub(folder) +
                "/train.jsonl --seed " + (std::string(folder) == "a" ? "1" : "2"))
                .status == 0);
  }
  Run files = mpmd("-wdir " + tmp.sub("a") + " " + ppo + " data.train_files=train.jsonl",
                   "-wdir " + tmp.sub("b") + " " + ppo + " data.train_files=train.jsonl");
  INFO(files.output);
  CHECK(files.status == 2);
  CHECK_THAT(files.output, Catch::Contains("file of data.train_files (train.jsonl) is ") &&
                               Catch::Contains(" on rank 1") && !Catch::Contains("parameters"));  // no model built
  CHECK_FALSE(fs::exists(tmp.sub("run") + "/metrics.jsonl"));
}

TEST_CASE("a reward program's field name with a control character stops the run naming it", "[mpi][reward]") {
  ppo_test::TempDir tmp;
  std::ofstream(tmp.sub("names.py")) << "import json, os, sys\n"
                                        "for line in sys.stdin:\n"
                                        "    name = 'a\\nb' if os.environ['PPO_RANK'] == '0' else 'c\\nd'\n"
                                        "    print(json.dumps({'score': 1, 'acc': True, name: 1}), flush=True)\n";
  Run r = train(2, tmp.sub("run"), "reward.command='python3 " + tmp.sub("names.py") + "'");
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("field name \"a\\nb\" is empty or holds a control character"));
}
