// Hostile input and failing machines, end to end: each case once crashed, hung, lost data or was
// silently accepted. Bad input exits 2 with one `error:` line; a failing disk exits 1 with one `error:` line and
// loses nothing already written; kill -9 at any moment resumes to the same numbers.
#include <sys/mount.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "common/files.h"
#include "common/jsonl.h"
#include "common/manifest.h"
#include "records/run_dir.h"
#include "tests/app/run_ppo.h"
#include "tests/paths.h"
#include "tests/temp_dir.h"
#include "tests/text_file.h"

namespace fs = std::filesystem;
using ppo_test::check_one_error;
using ppo_test::count_lines;
using ppo_test::read_text;
using ppo_test::Result;
using ppo_test::run_ppo;
using ppo_test::TempDir;
using ppo_test::write_text;

namespace {

const std::string kTiny = ppo_test::paths().source_dir + "/configs/regression_tiny.yaml";

// A short run of the tiny config into `dir`, with `extra` overrides.
std::string tiny_train(const std::string& dir, const std::string& extra) {
  return "train --config " + kTiny + " trainer.num_threads=1 trainer.logger=[jsonl] trainer.val_before_train=false " +
         "trainer.test_freq=0 trainer.output_dir=" + dir + " " + extra;
}

// The metrics of a run without the keys that measure time or memory: the numbers a resumed run must reproduce.
std::vector<nlohmann::json> numbers_of(const std::string& dir) {
  std::vector<nlohmann::json> lines = ppo::read_jsonl(dir + "/metrics.jsonl");
  for (nlohmann::json& line : lines)
    for (auto it = line.begin(); it != line.end();) {
      const std::string& k = it.key();
      const bool timing = k.rfind("timing_s/", 0) == 0 || k.rfind("perf/", 0) == 0 || k.rfind("memory/", 0) == 0;
      it = timing ? line.erase(it) : std::next(it);
    }
  return lines;
}

// A small tmpfs mounted for one test (root only); `mounted` is false where mounting is not allowed.
struct SmallDisk {
  TempDir dir{"ppo_small_disk"};
  bool mounted = false;
  explicit SmallDisk(int64_t bytes) {
    const std::string options = "size=" + std::to_string(bytes);
    mounted = ::geteuid() == 0 && ::mount("tmpfs", dir.path.c_str(), "tmpfs", 0, options.c_str()) == 0;
  }
  ~SmallDisk() {
    if (mounted) ::umount2(dir.path.c_str(), MNT_DETACH);
  }
  // Fills the disk with a file until `free_bytes` are left (to the page).
  void fill_leaving(int64_t free_bytes) const {
    std::ofstream filler(dir.sub("filler"), std::ios::binary);
    const std::string block(4096, 'x');
    for (;;) {
      const fs::space_info space = fs::space(dir.path);
      if (static_cast<int64_t>(space.available) <= free_bytes) break;
      filler << block << std::flush;
      if (!filler) break;
    }
  }
};

}  // namespace

TEST_CASE("reliability: nonsense numbers, YAML duplicates and documents, folders, dtype and threads exit 2",
          "[cpu][reliability]") {
  TempDir tmp;
  write_text(tmp.sub("dup.yaml"), "actor:\n  optim:\n    lr: 0.1\n    lr: 0.2\n");
  write_text(tmp.sub("docs.yaml"), "data:\n  seed: 1\n---\ndata:\n  seed: 2\n");
  write_text(tmp.sub("utf8.yaml"), "data:\n  task: \"rev\xff\"\n");
  write_text(tmp.sub("a_file"), "x");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"config actor.optim.lr=-0.1", "actor.optim.lr=-0.1 is out of range"},
      {"config actor.optim.lr=.inf", "actor.optim.lr: '.inf' is not a finite number"},
      {"config algorithm.lam=inf", "algorithm.lam: 'inf' is not a finite number"},
      {"config actor.clip_ratio=0", "actor.clip_ratio=0 is out of range"},
      {"config actor.grad_clip=0", "actor.grad_clip=0 is out of range"},
      {"config algorithm.gamma=1.5", "algorithm.gamma=1.5 is out of range"},
      {"config parallel.timeout_s=-1", "parallel.timeout_s=-1"},
      {"config --config " + tmp.sub("dup.yaml"), "dup.yaml:4: key 'lr' is given twice"},
      {"config --config " + tmp.sub("docs.yaml"), "holds 2 YAML documents"},
      {"config --config " + tmp.sub("utf8.yaml"), "utf8.yaml:2: not valid UTF-8"},
      {"config --config " + tmp.path.string(), "is a folder"},
      {"config trainer.num_threads=100000", "trainer.num_threads=100000 is more than the"},
      {"config trainer.num_threads=-3", "trainer.num_threads=-3 must be >= 0"},
      {"train model.dtype=bfloat16", "model.dtype=bfloat16 needs a CUDA device"},
      {"train model.dtype=float16", "model.dtype=float16 needs a CUDA device"},
      {tiny_train(tmp.sub("a_file") + "/run", ""), "cannot be created"},
      {"train actor.router_replay=R3", "actor.router_replay=R3 replays a mixture-of-experts policy's routing"},
      {"train actor.lora.rank=4 actor.lora.target_parameters=[mlp.experts.down_proj]",
       "actor.lora.target_parameters names experts and the model has none"},
      {"train model.model_type=mixtral model.moe.num_experts=4 model.moe.num_experts_per_tok=5",
       "model.moe.num_experts_per_tok (5) must not exceed model.moe.num_experts (4)"},
      {"train model.model_type=qwen3_moe model.qk_norm=true model.moe.num_experts=4 model.moe.mlp_only_layers=[9]",
       "model.moe.mlp_only_layers: layer 9"},
  };
  for (const auto& [args, expected] : cases) {
    INFO("ppo " << args);
    check_one_error(run_ppo(args), expected);
  }
}

TEST_CASE("reliability: a damaged, hand-edited or foreign checkpoint stops with exit 2 naming the file",
          "[cpu][reliability]") {
  TempDir tmp;
  const std::string run = tmp.sub("run");
  Result first = run_ppo(tiny_train(run, "trainer.total_training_steps=2 trainer.save_freq=2"));
  REQUIRE(first.status == 0);
  const std::string ckpt = run + "/checkpoints/global_step_2";
  REQUIRE(fs::exists(ckpt + "/manifest.json"));
  const auto fresh_copy = [&](const std::string& name) {
    const std::string copy = tmp.sub(name);
    fs::copy(run, copy, fs::copy_options::recursive);
    return copy;
  };
  {  // one flipped bit inside the tensor data
    const std::string copy = fresh_copy("flip");
    std::string bytes = read_text(copy + "/checkpoints/global_step_2/actor.pt");
    bytes[bytes.size() / 2] ^= 0x04;
    write_text(copy + "/checkpoints/global_step_2/actor.pt", bytes);
    check_one_error(run_ppo(tiny_train(copy, "trainer.total_training_steps=4")), "actor.pt is damaged");
  }
  {  // a hand-written trainer_state.json (no manifest, accepted unverified): a negative step once crashed with SIGSEGV
    const std::string copy = fresh_copy("negative"), unverified = " trainer.accept_checkpoints_without_manifest=true";
    fs::remove(copy + "/checkpoints/global_step_2/manifest.json");
    nlohmann::json state = nlohmann::json::parse(read_text(copy + "/checkpoints/global_step_2/trainer_state.json"));
    state["global_step"] = -5;
    write_text(copy + "/checkpoints/global_step_2/trainer_state.json", state.dump());
    check_one_error(run_ppo(tiny_train(copy, "trainer.total_training_steps=4" + unverified)),
                    "trainer_state.json: key 'global_step' is -5, outside [0, 2^53)");
    state["global_step"] = 2;
    state.erase("kl_coef");
    write_text(copy + "/checkpoints/global_step_2/trainer_state.json", state.dump());
    check_one_error(run_ppo(tiny_train(copy, "trainer.total_training_steps=4" + unverified)),
                    "key 'kl_coef' is missing");
  }
  {  // a checkpoint of another model shape: for training and for export
    const std::string copy = fresh_copy("shape");
    check_one_error(run_ppo(tiny_train(copy, "trainer.total_training_steps=4 model.hidden_size=32")),
                    "model.hidden_size is 32 here, 64 in the checkpoint");
    check_one_error(run_ppo(tiny_train(copy,
                                       "trainer.total_training_steps=4 model.hidden_size=32 "
                                       "trainer.resume_allow_config_change=true")),
                    "has shape [99, 64], the model of this config [99, 32]");
    const std::string out = tmp.sub("hf");
    check_one_error(
        run_ppo("export --checkpoint " + copy + "/checkpoints/global_step_2 --out " + out + " model.hidden_size=32"),
        "the checkpoint is of another model shape");
    CHECK_FALSE(fs::exists(out));
    CHECK_FALSE(ppo_test::temporary_left_beside(out));
  }
  // The undamaged run resumes.
  Result resumed = run_ppo(tiny_train(run, "trainer.total_training_steps=3"));
  INFO(resumed.output);
  CHECK(resumed.status == 0);
  CHECK_THAT(resumed.output, Catch::Contains("at step 2"));
}

TEST_CASE("reliability: a fresh run in a used folder keeps the earlier checkpoints and prunes only its own",
          "[cpu][reliability]") {
  TempDir tmp;
  const std::string run = tmp.sub("run");
  REQUIRE(run_ppo(tiny_train(run, "trainer.total_training_steps=4 trainer.save_freq=2")).status == 0);
  Result again =
      run_ppo(tiny_train(run, "trainer.resume_mode=disable trainer.total_training_steps=3 trainer.save_freq=1"));
  INFO(again.output);
  REQUIRE(again.status == 0);
  // The earlier run's checkpoints moved aside: the new run prunes among its own {1, 2, 3} only, and its step 2 is its
  // own, not the earlier run's.
  CHECK(read_text(run + "/checkpoints/latest_checkpointed_iteration.txt") == "3\n");
  CHECK(fs::exists(run + "/checkpoints/global_step_3"));
  CHECK(fs::exists(run + "/checkpoints/global_step_2"));
  CHECK_FALSE(fs::exists(run + "/checkpoints/global_step_1"));
  CHECK_FALSE(fs::exists(run + "/checkpoints/global_step_4"));
  CHECK(fs::exists(run + "/previous-1/checkpoints/global_step_2/actor.pt"));
  CHECK(fs::exists(run + "/previous-1/checkpoints/global_step_4/actor.pt"));
  CHECK(fs::exists(run + "/metrics.previous-1.jsonl"));
}

TEST_CASE("reliability: ppo export refuses a used folder without --force and leaves no temporary",
          "[cpu][reliability]") {
  TempDir tmp;
  const std::string run = tmp.sub("run");
  REQUIRE(run_ppo(tiny_train(run, "trainer.total_training_steps=1")).status == 0);
  const std::string out = tmp.sub("hf"), checkpoint = run + "/checkpoints/global_step_1";
  fs::create_directories(out);
  write_text(out + "/config.json", "{}");
  check_one_error(run_ppo("export --checkpoint " + checkpoint + " --out " + out),
                  "pass --force to replace an earlier export");
  CHECK(read_text(out + "/config.json") == "{}");
  Result forced = run_ppo("export --checkpoint " + checkpoint + " --out " + out + " --force");
  INFO(forced.output);
  REQUIRE(forced.status == 0);
  CHECK(fs::exists(out + "/model.safetensors"));
  CHECK(read_text(out + "/config.json") != "{}");
  CHECK_FALSE(ppo_test::temporary_left_beside(out));
}

TEST_CASE("reliability: skipped optimizer steps print a warning, and max_skipped_steps in a row stop the run",
          "[cpu][reliability]") {
  TempDir tmp;
  // A learning rate of 1e30 sends the weights to overflow after the first update: every later gradient norm is
  // non-finite, so every later optimizer step is skipped.
  Result r = run_ppo(tiny_train(tmp.sub("run"),
                                "trainer.total_training_steps=20 actor.optim.lr=1e30 "
                                "critic.optim.lr=1e30 trainer.max_skipped_steps=3"));
  check_one_error(r, "3 steps in a row skipped optimizer steps", 1);
  CHECK(count_lines(r.output, "warning: step ") == 3);
  const auto lines = ppo::read_jsonl(tmp.sub("run") + "/metrics.jsonl");
  REQUIRE(!lines.empty());
  CHECK(lines.size() < 20);
}

TEST_CASE("reliability: dynamic sampling that finds too few groups with signal stops with one error, losing nothing",
          "[cpu][reliability]") {
  TempDir tmp;
  // 2 steps with a checkpoint; then the run resumes (allowed to change its config) with DAPO dynamic sampling on
  // accuracy, which the untrained tiny model never reaches: every group is all-wrong, none has signal.
  Result first = run_ppo(tiny_train(tmp.sub("run"), "trainer.total_training_steps=2 rollout.n=2"));
  REQUIRE(first.status == 0);
  Result r = run_ppo(tiny_train(tmp.sub("run"),
                                "trainer.total_training_steps=4 rollout.n=2 algorithm.filter_groups.enable=true "
                                "algorithm.filter_groups.metric=acc algorithm.filter_groups.max_num_gen_batches=2 "
                                "trainer.resume_allow_config_change=true"));
  check_one_error(r,
                  "algorithm.filter_groups: 2 generation batches (max_num_gen_batches) gave 0 of the 16 prompt "
                  "groups whose responses differ in acc (of 32 generated)",
                  1);
  CHECK(ppo::read_jsonl(tmp.sub("run") + "/metrics.jsonl").size() == 2);
  CHECK(fs::exists(tmp.sub("run") + "/checkpoints/global_step_2/trainer_state.json"));
}

// [mount]: its own ctest entry, `full_disk`, skipped (exit 77) where a tmpfs cannot be mounted (tests/main.cpp).
TEST_CASE("reliability: a full disk while writing a checkpoint or metrics is one error, and nothing written is lost",
          "[reliability][mount]") {
  TempDir plain;
  // Room for one checkpoint and a half: the second one cannot be written. A ZeRO checkpoint (per-unit safetensors,
  // sharded optimizer files) is written through its own temporary folder: it must go too.
  for (const std::string zero : {"parallel.zero_stage=0", "parallel.zero_stage=3"}) {
    INFO(zero);
    const std::string sized = plain.sub("sized" + zero);
    REQUIRE(run_ppo(tiny_train(sized, "trainer.total_training_steps=2 trainer.save_freq=2 " + zero)).status == 0);
    int64_t checkpoint_bytes = 0;
    for (const auto& f : fs::recursive_directory_iterator(sized + "/checkpoints/global_step_2"))
      if (f.is_regular_file()) checkpoint_bytes += static_cast<int64_t>(f.file_size()) + 4096;
    SmallDisk disk(checkpoint_bytes * 3 / 2 + (256 << 10));
    REQUIRE(disk.mounted);
    const std::string run = disk.dir.sub("run");
    Result r = run_ppo(
        tiny_train(run, "trainer.total_training_steps=4 trainer.save_freq=2 trainer.max_ckpt_to_keep=0 " + zero));
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(count_lines(r.output, "error: ") == 1);
    CHECK_THAT(r.output, Catch::Contains("No space left on device"));
    CHECK_THAT(r.output, Catch::Contains("the checkpoint of step 4 was not written"));
    CHECK_THAT(r.output, !Catch::Contains("terminate"));
    CHECK_FALSE(ppo_test::temporary_left_beside(run + "/checkpoints/global_step_4"));
    CHECK_FALSE(fs::exists(run + "/checkpoints/global_step_4"));
    CHECK(read_text(run + "/checkpoints/latest_checkpointed_iteration.txt") == "2\n");
    ppo::verify_manifest(run + "/checkpoints/global_step_2");
    CHECK(ppo::read_jsonl(run + "/metrics.jsonl").size() == 4);  // every line whole
  }
  {  // metrics on a full disk: the append fails, the run stops, no line is left cut short
    SmallDisk disk(1 << 20);
    const std::string run = disk.dir.sub("run");
    disk.fill_leaving(24 << 10);
    Result r = run_ppo(tiny_train(run, "trainer.total_training_steps=40 trainer.write_checkpoints=false"));
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(count_lines(r.output, "error: ") == 1);
    CHECK_THAT(r.output, Catch::Contains("No space left on device"));
    std::ifstream in(run + "/metrics.jsonl");
    int whole = 0;
    for (std::string line; std::getline(in, line);) {
      CHECK_NOTHROW(nlohmann::json::parse(line));
      ++whole;
    }
    CHECK(whole > 0);
    CHECK(whole < 40);
  }
  {  // the rewrite of metrics.jsonl on resume, on a full disk: the file stays as it was (it was emptied before)
    SmallDisk disk(1 << 20);
    const std::string run = disk.dir.sub("run");
    fs::create_directories(run);
    std::string lines;
    for (int step = 1; step <= 40; ++step)
      lines += nlohmann::json{{"training/global_step", step}, {"pad", std::string(2000, 'p')}}.dump() + "\n";
    write_text(run + "/metrics.jsonl", lines);
    disk.fill_leaving(0);
    ppo::RunDir dir(run, /*is_root=*/true, {"jsonl"});
    CHECK_THROWS_AS(dir.truncate_metrics_after(10), ppo::IoError);
    CHECK(read_text(run + "/metrics.jsonl") == lines);
  }
}

TEST_CASE("reliability: kill -9 at random moments, then resume, gives the numbers of an uninterrupted run",
          "[cpu][reliability]") {
  TempDir tmp;
  const std::string steps = "trainer.total_training_steps=40 trainer.save_freq=4 trainer.test_freq=10";
  const std::string whole = tmp.sub("whole"), killed = tmp.sub("killed");
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(run_ppo(tiny_train(whole, steps)).status == 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::mt19937 rng(20);
  // Early moments: a resumed run has less left to do. At most 0.15 of the uninterrupted run's time each, so four
  // killed runs cannot finish the work (0.6 of it) even when that run was slowed down by a busy machine: with moments
  // up to 0.35, three runs sometimes did once generation got faster (CI: 2 kills).
  std::uniform_real_distribution<double> moment(0.02 * seconds, 0.15 * seconds);
  int kills = 0, finished = 0;
  for (int attempt = 0; attempt < 30 && !finished; ++attempt) {
    const bool kill = attempt < 8;  // eight kills, then let it finish
    char delay[32];
    std::snprintf(delay, sizeof(delay), "%.3f", kill ? moment(rng) : 0.0);
    // The run in the background, killed with SIGKILL after `delay` seconds unless it finished first. The killer's
    // output goes to /dev/null: a sleep left holding ctest's output pipe would keep the test "running" until its
    // timeout.
    const std::string killer = kill ? std::string("(sleep ") + delay + " && kill -9 $pid) > /dev/null 2>&1 & " : "";
    const std::string script = ppo_test::paths().ppo_binary + " " + tiny_train(killed, steps) + " > " + tmp.sub("log") +
                               " 2>&1 & pid=$!; " + killer + "wait $pid";
    const int status = std::system(("bash -c '" + script + "'").c_str());
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    INFO("attempt " << attempt << " killed at " << delay << " s: exit " << code << "\n" << read_text(tmp.sub("log")));
    REQUIRE((code == 0 || code == 137));
    kills += code == 137;
    finished = code == 0;
  }
  REQUIRE(finished);
  WARN(kills << " kills, the uninterrupted run took " << seconds << " s");
  CHECK(kills >= 4);
  const auto a = numbers_of(whole), b = numbers_of(killed);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("line " << i);
    CHECK(a[i] == b[i]);
  }
}
