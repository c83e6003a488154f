// Hostile input, through the real binary: sharded optimizer state whose parts or index disagree with the model or
// with their own names; sizes and numbers without a bound (counts of the command line, a world size near 2^63, a
// Parquet row that declares hundreds of millions of values, scores near float32's maximum); and the rest: ppo
// started through the dynamic loader, an earlier run's config and curves in a reused folder, control characters in a
// data_source, `export --max-shard-bytes 0`. Each exits 2 with one `error:` line naming the file, field, key or flag
// (or runs, where it should), and nothing already written changes.
#include <elf.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/jsonl.h"
#include "common/manifest.h"
#include "model/safetensors.h"
#include "tests/app/run_ppo.h"
#include "tests/paths.h"
#include "tests/same_runs.h"
#include "tests/temp_dir.h"
#include "tests/text_file.h"

namespace fs = std::filesystem;
using nlohmann::json;
using ppo_test::check_one_error, ppo_test::run_ppo, ppo_test::TempDir;
using ppo_test::read_text, ppo_test::write_text;

namespace {

const std::string& kTiny = ppo_test::kTinyOneThread;
constexpr int kLimit = 120;  // seconds: a hang is killed and fails

// `ppo train` of the tiny config into `dir` for `steps` steps (resuming what is there), with `extra`.
ppo_test::Result train(const std::string& dir, int steps, const std::string& extra) {
  return run_ppo("train " + kTiny + "trainer.output_dir=" + dir + " trainer.total_training_steps=" +
                     std::to_string(steps) + " trainer.test_freq=0 trainer.val_before_train=false " + extra,
                 kLimit);
}

// The dynamic loader `binary` names (its PT_INTERP), or "" when it has none.
std::string interpreter_of(const std::string& binary) {
  std::ifstream in(binary, std::ios::binary);
  Elf64_Ehdr header{};
  in.read(reinterpret_cast<char*>(&header), sizeof header);
  for (int i = 0; in && i < header.e_phnum; ++i) {
    Elf64_Phdr segment{};
    in.seekg(static_cast<std::streamoff>(header.e_phoff + i * sizeof segment));
    in.read(reinterpret_cast<char*>(&segment), sizeof segment);
    if (segment.p_type != PT_INTERP) continue;
    std::string path(segment.p_filesz, '\0');
    in.seekg(static_cast<std::streamoff>(segment.p_offset));
    in.read(path.data(), static_cast<std::streamsize>(path.size()));
    return path.c_str();  // without its terminating NUL
  }
  return "";
}

}  // namespace

TEST_CASE("hostile sharded state: a part whose recorded rank or world size is not its name's is named",
          "[cpu][zero][reliability]") {
  TempDir tmp;
  const std::string run = tmp.sub("run"), checkpoint = run + "/checkpoints/global_step_2";
  REQUIRE(train(run, 2, "parallel.zero_stage=1").status == 0);
  const std::string part = checkpoint + "/actor_optim.0-of-1.safetensors";
  REQUIRE(fs::exists(part));
  const std::string metrics = read_text(run + "/metrics.jsonl");
  json metadata;
  const auto tensors = ppo::load_safetensors(part, &metadata);
  metadata["rank"] = "1";
  metadata["world_size"] = "2";
  ppo::save_safetensors(part, tensors, metadata);
  ppo::write_manifest(checkpoint);  // a manifest rebuilt over the renamed part: only the part's record says so
  check_one_error(train(run, 3, "parallel.zero_stage=1"),
                  part + ": written by rank 1 of 2, and its name says rank 0 of 1");
  CHECK(read_text(run + "/metrics.jsonl") == metrics);
}

TEST_CASE("hostile sharded state: two parts swapped between ranks do not resume", "[mpi][zero][reliability]") {
  TempDir tmp;
  const std::string run = tmp.sub("run"), checkpoint = run + "/checkpoints/global_step_2";
  const std::string ranks = ppo_test::mpirun(2);
  REQUIRE(ppo_test::run(ranks + ppo_test::paths().ppo_binary + " train " + kTiny + "trainer.output_dir=" + run +
                        " trainer.total_training_steps=2 trainer.test_freq=0 trainer.val_before_train=false "
                        "parallel.zero_stage=2")
              .status == 0);
  const std::string a = checkpoint + "/actor_optim.0-of-2.safetensors",
                    b = checkpoint + "/actor_optim.1-of-2.safetensors";
  fs::rename(a, a + ".swap");
  fs::rename(b, a);
  fs::rename(a + ".swap", b);
  fs::remove(checkpoint + "/manifest.json");
  const auto r = ppo_test::run(ranks + ppo_test::paths().ppo_binary + " train " + kTiny + "trainer.output_dir=" + run +
                               " trainer.total_training_steps=3 trainer.test_freq=0 trainer.val_before_train=false "
                               "parallel.zero_stage=2 trainer.accept_checkpoints_without_manifest=true");
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains(", and its name says rank "));
}

TEST_CASE(
    "hostile sharded state: every field of the optimizer index is read with its type and checked against the "
    "model",
    "[cpu][zero][reliability]") {
  TempDir tmp;
  const std::string run = tmp.sub("run"), checkpoint = run + "/checkpoints/global_step_2";
  REQUIRE(train(run, 2, "parallel.zero_stage=1").status == 0);
  const std::string index = checkpoint + "/actor_optim.index.json", metrics = read_text(run + "/metrics.jsonl");
  const json original = json::parse(read_text(index));
  const json& first = original["units"][0]["parameters"][0];
  REQUIRE(first["shape"].size() == 2);
  const int64_t numel = first["numel"].get<int64_t>();
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& j) { j["units"][0]["parameters"][0]["offset"] = 1; }, "parameter 0 is "},
      {[&](json& j) { j["units"][0]["parameters"][0]["shape"] = json::array({numel}); },
       "with shape [" + std::to_string(numel) + "]"},
      {[](json& j) { j["units"][1]["steps"] = 99; }, "took 99 optimizer steps"},
      {[](json& j) { j["units"][0]["numel"] = 4611686018427387904LL; }, "field units[0].numel is 4611686018427387904"},
      {[](json& j) { j["units"][0]["parameters"][0]["numel"] = -5; }, "field units[0].parameters[0].numel is -5"},
      {[](json& j) {
         j["units"][0]["parameters"][0]["shape"] = json::array({1, "x"});
       },
       "field units[0].parameters[0].shape[1]"},
      {[](json& j) { j.erase("tag"); }, "field tag is missing"},
      {[](json& j) { j["tag"] = 5; }, "field tag is 5, expected a string"},
      {[](json& j) { j["world_size"] = 0; }, "field world_size is 0"},
      {[](json& j) { j["units"] = "all"; }, "field units is not an array"},
      {[](json& j) { j["units"].erase(0); }, "no unit model.layers.0"},
      {[](json& j) { j["units"][0]["name"] = "model.layers.9"; }, "unit model.layers.9 is not a unit of this model"},
      {[](json& j) { j["units"][0]["parameters"][0]["name"] = j["units"][0]["parameters"][1]["name"]; },
       "is listed twice"}};
  int i = 0;
  for (const auto& [edit, expected] : cases) {
    INFO("case " << i++);
    json edited = original;
    edit(edited);
    write_text(index, edited.dump(1));
    ppo::write_manifest(checkpoint);  // a manifest rebuilt over the edit: the index alone must not be trusted
    const auto r = train(run, 3, "parallel.zero_stage=1");
    check_one_error(r, index + ": ");
    CHECK_THAT(r.output, Catch::Contains(expected));
    CHECK(read_text(run + "/metrics.jsonl") == metrics);
  }
  write_text(index, original.dump(1));
  ppo::write_manifest(checkpoint);
  const auto resumed = train(run, 3, "parallel.zero_stage=1");
  INFO(resumed.output);
  CHECK(resumed.status == 0);
}

TEST_CASE("hostile sizes: counts and sizes of the command line have bounds that name the flag", "[cpu][reliability]") {
  check_one_error(run_ppo("plan " + kTiny + "--world-size 4611686018427387904 parallel.pad_to_world=true", kLimit),
                  "--world-size=4611686018427387904 is out of range: 1 to 1048576");
  check_one_error(run_ppo("plan " + kTiny + "--world-size 9223372036854775807 parallel.pad_to_world=true", kLimit),
                  "--world-size=9223372036854775807 is out of range");
  check_one_error(run_ppo("plan " + kTiny + "--prompt-length 4611686018427387904", kLimit),
                  "--prompt-length=4611686018427387904 is out of range");
  check_one_error(run_ppo("eval " + kTiny + "--samples 1000000000000", kLimit),
                  "--samples=1000000000000 is out of range: 1 to 65536");
  // In range, but more than memory holds: refused before anything is allocated, naming the flag and the size.
  check_one_error(
      run_ppo("eval " + kTiny + "--samples 65536 data.max_response_length=1024 model.max_position_embeddings=1040",
              kLimit),
      "or eval's --samples");
  check_one_error(run_ppo("generate " + kTiny + "--count 0", kLimit), "--count=0 is out of range");
  // A value that is no whole number: cxxopts quotes it, ppo names its flag.
  check_one_error(run_ppo("eval " + kTiny + "--samples x", kLimit), "--samples: Argument");
  check_one_error(run_ppo("plan " + kTiny + "--world-size=99999999999999999999", kLimit), "--world-size: Argument");
  TempDir tmp;
  const std::string out = tmp.sub("kk.jsonl");
  check_one_error(run_ppo("data kk --count 1000000000000000 --out " + out, kLimit),
                  "--count=1000000000000000 is out of range: 1 to 16777216");
  check_one_error(run_ppo("data kk --depth 40 --count 2 --out " + out, kLimit), "--depth=40 is out of range: 1 to 8");
  check_one_error(run_ppo("data kk --width 1000000 --count 2 --out " + out, kLimit),
                  "--width=1000000 is out of range: 2 to 8");
  check_one_error(run_ppo("regress --jobs 0 --out " + tmp.sub("regress"), kLimit), "--jobs=0 is out of range");
  CHECK_FALSE(fs::exists(out));
  CHECK_FALSE(fs::exists(tmp.sub("regress")));
}

TEST_CASE("hostile sizes: a Parquet record that declares hundreds of millions of values is named, not decoded",
          "[cpu][parquet][reliability]") {
  const std::string seeds = ppo_test::paths().source_dir + "/tests/fuzz/parquet/";
  TempDir tmp;
  // Under a memory limit of 1 GiB: decoding any of them whole would take gigabytes.
  const std::string limited = "ulimit -v 4000000; ";
  for (const auto& [file, expected] : std::vector<std::pair<std::string, std::string>>{
           {"huge_null_list.parquet",
            "row group 0 (from row 0), column 'extra.list.element': declares 300000000 "
            "values for 1 rows"},
           {"huge_int_nulls.parquet",
            "row group 0 (from row 0), column 'extra.list.element': declares 20000000 "
            "values for 1 rows"},
           {"huge_list_in_group.parquet",
            "row 5, column 'extra': the record decodes to more than 16 MiB (a list of "
            "2000000 elements)"},
           // Found by fuzz_parquet: a page header that declares 1.8 GB, which Arrow's buffered stream allocated.
           {"huge_page.parquet", "row group 0 (from row 0): damaged data: a buffer of 1794504384 bytes asked for"}}) {
    INFO(file);
    const auto r = ppo_test::run(limited + ppo_test::paths().ppo_binary + " train " + kTiny +
                                 "data.train_files=" + seeds + file + " trainer.output_dir=" + tmp.sub(file));
    check_one_error({r.status, r.output}, seeds + file + ": " + expected);
  }
}

TEST_CASE("hostile numbers: a score or reward near float32's maximum is named with its program", "[cpu][reliability]") {
  TempDir tmp;
  write_text(tmp.sub("reward.py"),
             "import json, sys\nfor line in sys.stdin:\n    print(json.dumps({'score': 3.0e38}), flush=True)\n");
  const std::string run = tmp.sub("run");
  const auto r = run_ppo("train " + kTiny + "trainer.total_training_steps=2 trainer.output_dir=" + run +
                             " reward.command='python3 " + tmp.sub("reward.py") + "'",
                         kLimit);
  check_one_error(r, "reward.command 'python3 " + tmp.sub("reward.py") + "'");
  CHECK_THAT(r.output, Catch::Contains("\"score\" 3e+38 is outside [-1e6, 1e6]"));
  write_text(tmp.sub("env.py"),
             "import json, sys\nfor line in sys.stdin:\n"
             "    print(json.dumps({'output': 'x', 'reward': -1.0e30}), flush=True)\n");
  const auto t = run_ppo("train " + kTiny +
                             "trainer.total_training_steps=2 data.max_response_length=48 "
                             "model.max_position_embeddings=64 rollout.multi_turn.enable=true "
                             "rollout.multi_turn.call_start= rollout.multi_turn.stop= "
                             "rollout.multi_turn.environment.command='python3 " +
                             tmp.sub("env.py") + "' trainer.output_dir=" + tmp.sub("tools"),
                         kLimit);
  check_one_error(t, "rollout.multi_turn.environment.command 'python3 " + tmp.sub("env.py") + "'");
  CHECK_THAT(t.output, Catch::Contains("\"reward\" -1e+30 is outside [-1e6, 1e6]"));
}

TEST_CASE("hostile rest: ppo started through the dynamic loader runs itself with its arguments", "[cpu][reliability]") {
  const std::string loader = interpreter_of(ppo_test::paths().ppo_binary);
  REQUIRE_FALSE(loader.empty());
  // The spin-wait re-execution (app/spin_wait.cpp) must not take the loader for the program.
  const auto r = ppo_test::run("env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY " + loader + " " +
                               ppo_test::paths().ppo_binary + " config");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.rfind("data:", 0) == 0);
  const auto direct =
      ppo_test::run("env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY " + ppo_test::paths().ppo_binary + " config");
  CHECK(direct.status == 0);
  CHECK(direct.output == r.output);
}

TEST_CASE(
    "hostile rest: a fresh run in a used folder sets aside the earlier run's config and curves with its "
    "checkpoints",
    "[cpu][reliability]") {
  TempDir tmp;
  const std::string run = tmp.sub("run");
  REQUIRE(train(run, 2, "data.seed=5").status == 0);
  const std::string config = read_text(run + "/config.yaml"), curves = read_text(run + "/curves.svg");
  REQUIRE_FALSE(curves.empty());
  REQUIRE(train(run, 1, "trainer.resume_mode=disable").status == 0);
  CHECK(read_text(run + "/previous-1/config.yaml") == config);
  CHECK(read_text(run + "/previous-1/curves.svg") == curves);
  CHECK(read_text(run + "/config.yaml") != config);
  // The earlier run's checkpoint exports with the earlier run's config, found beside it.
  const auto exported =
      run_ppo("export --checkpoint " + run + "/previous-1/checkpoints/global_step_2 --out " + tmp.sub("hf"), kLimit);
  INFO(exported.output);
  CHECK(exported.status == 0);
}

TEST_CASE("hostile rest: a data_source with control characters is refused naming the file and line",
          "[cpu][reliability]") {
  TempDir tmp;
  for (const std::string& source :
       {std::string("rev\x1b[31merse"), std::string("rev\nerse"), std::string("rev\0erse", 8)}) {
    const json record = {{"data_source", source},
                         {"prompt", json::array({{{"role", "user"}, {"content", "12>"}}})},
                         {"reward_model", {{"ground_truth", "21"}}}};
    write_text(tmp.sub("val.jsonl"), record.dump() + "\n");
    const auto r = run_ppo("generate " + kTiny + "data.val_files=" + tmp.sub("val.jsonl"), kLimit);
    check_one_error(r, tmp.sub("val.jsonl") + ":1: field 'data_source': ");
    CHECK_THAT(r.output, Catch::Contains("holds a control character"));
    CHECK_THAT(r.output, !Catch::Contains("\x1b"));
  }
}

TEST_CASE("hostile rest: export --max-shard-bytes 0 names the flag", "[cpu][reliability]") {
  TempDir tmp;
  const std::string run = tmp.sub("run");
  REQUIRE(train(run, 1, "").status == 0);
  check_one_error(
      run_ppo("export --checkpoint " + run + "/checkpoints/global_step_1 --max-shard-bytes 0 --out " + tmp.sub("hf"),
              kLimit),
      "--max-shard-bytes is 0");
  CHECK_FALSE(fs::exists(tmp.sub("hf")));
}

TEST_CASE("hostile run folders: a dangling previous-1 link, a file named orphaned", "[cpu][reliability]") {
  TempDir tmp;
  const std::string dir = tmp.sub("run");
  REQUIRE(train(dir, 1, "").status == 0);
  fs::create_directory_symlink(tmp.sub("gone"), dir + "/previous-1");  // dangling
  // A fresh run sets the earlier one aside whole, past the link.
  const ppo_test::Result fresh = train(dir, 1, "trainer.resume_mode=disable");
  INFO(fresh.output);
  CHECK(fresh.status == 0);
  CHECK(fs::exists(dir + "/previous-2/checkpoints/global_step_1/manifest.json"));
  CHECK(fs::exists(dir + "/metrics.previous-2.jsonl"));
  CHECK(fs::is_symlink(dir + "/previous-1"));
  // A resume from step 1 sets step 2's checkpoint aside in orphaned/: a file of that name is named, nothing moved.
  REQUIRE(train(dir, 2, "trainer.save_freq=1").status == 0);
  write_text(dir + "/checkpoints/latest_checkpointed_iteration.txt", "1\n");
  write_text(dir + "/orphaned", "a file\n");
  const std::string metrics = read_text(dir + "/metrics.jsonl");
  check_one_error(train(dir, 2, "trainer.save_freq=1"), dir + "/orphaned is not a folder");
  CHECK(fs::exists(dir + "/checkpoints/global_step_2/manifest.json"));
  CHECK(read_text(dir + "/metrics.jsonl") == metrics);
}
