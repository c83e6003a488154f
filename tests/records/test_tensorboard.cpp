// TensorBoard event files (records/tensorboard.h): CRC-32C and TFRecord framing, torn records, and ([ref]) a training
// run with a crash and a resume read back by TensorBoard's own reader, every scalar of every step equal to
// metrics.jsonl.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/files.h"
#include "common/jsonl.h"
#include "records/run_dir.h"
#include "records/tensorboard.h"
#include "tests/app/run_ppo.h"
#include "tests/paths.h"
#include "tests/reference/reference.h"
#include "tests/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

using ppo::read_jsonl;

// The scalars TensorBoard reads from the event files of `dir` (tests/reference/tensorboard_scalars.py).
json tensorboard_scalars(const std::string& dir, const ppo_test::TempDir& tmp) {
  const std::string out = tmp.sub("scalars_" + std::to_string(std::hash<std::string>()(dir)) + ".json");
  ppo_test::run_reference("tensorboard_scalars.py", "\"" + dir + "\" > \"" + out + "\"");
  return json::parse(read_file(out));
}

// Every number of every line of `jsonl` is the scalar TensorBoard shows for that tag at that line's
// training/global_step, to float32 precision (a null is a non-finite value there), and TensorBoard shows nothing
// else. Returns how many scalars were compared.
size_t require_same_scalars(const std::vector<json>& jsonl, const json& scalars) {
  std::map<std::string, std::map<int64_t, json>> tb;
  size_t tb_count = 0;
  for (const auto& [tag, events] : scalars.items())
    for (const json& e : events) {
      INFO(tag << " step " << e[0]);
      CHECK(tb[tag].count(e[0].get<int64_t>()) == 0);  // one value per tag and step: no duplicate after a resume
      tb[tag][e[0].get<int64_t>()] = e[1];
      ++tb_count;
    }
  size_t compared = 0;
  for (const json& line : jsonl) {
    const auto step = static_cast<int64_t>(line.at("training/global_step").get<double>());
    for (const auto& [key, value] : line.items()) {
      if (!value.is_number() && !value.is_null()) continue;
      INFO(key << " at step " << step);
      REQUIRE(tb[key].count(step) == 1);
      const json& shown = tb[key][step];
      if (value.is_null()) {
        CHECK(shown.is_string());  // "nan" / "inf"
      } else {
        REQUIRE(shown.is_number());
        CHECK(static_cast<float>(value.get<double>()) == static_cast<float>(shown.get<double>()));
      }
      ++compared;
    }
  }
  CHECK(compared == tb_count);
  return compared;
}

}  // namespace

TEST_CASE("tensorboard: CRC-32C, TFRecord framing and torn records", "[cpu][tensorboard]") {
  // The CRC-32C check value (RFC 3720 B.4: "123456789" -> 0xE3069283), and 32 zero bytes -> 0x8A9136AA.
  CHECK(ppo::crc32c("123456789", 9) == 0xE3069283u);
  CHECK(ppo::crc32c(std::string(32, '\0').data(), 32) == 0x8A9136AAu);

  ppo_test::TempDir tmp("ppo_tb");
  const std::string file = tmp.sub("events.out.tfevents.1.test.ppo");
  {
    ppo::EventFileWriter writer(file);
    writer.add(1, {{"a/x", 0.5}, {"b", -2.0}});
    writer.add(2, {{"a/x", std::nan("")}});
  }
  std::vector<ppo::EventRecord> records = ppo::read_event_file(file);
  REQUIRE(records.size() == 3);
  CHECK(records[0].file_version);
  CHECK((records[1].step == 1 && records[2].step == 2));
  // Past the wall time (tag byte + 8-byte double), the record is exactly the event ppo.cpp serializes.
  CHECK(records[1].data.substr(9) == ppo::event_scalars(0, 1, {{"a/x", 0.5}, {"b", -2.0}}).substr(9));

  // A write cut short by a crash: the reader stops before it, and a new writer cuts it off before appending.
  const std::string whole = read_file(file);
  std::ofstream(file, std::ios::binary | std::ios::app)
      << ppo::tf_record(ppo::event_scalars(0, 3, {{"c", 1}})).substr(0, 20);
  CHECK(ppo::read_event_file(file).size() == 3);
  {
    ppo::EventFileWriter writer(file);
    writer.add(3, {{"c", 1.0}});
  }
  records = ppo::read_event_file(file);
  REQUIRE(records.size() == 4);
  CHECK(records[3].step == 3);
  CHECK(read_file(file).substr(0, whole.size()) == whole);

  // A flipped byte inside a record's data fails its CRC: that record and everything after it are not read.
  std::string bytes = read_file(file);
  bytes[whole.size() - 6] ^= 0x40;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  CHECK(ppo::read_event_file(file).size() == 2);
}

TEST_CASE("tensorboard: unknown or repeated trainer.logger names are usage errors", "[cpu][tensorboard]") {
  ppo_test::TempDir tmp("ppo_tb");
  CHECK_THROWS_WITH(ppo::RunDir(tmp.sub("r"), true, {"console", "neptune"}),
                    Catch::Contains("unknown logger 'neptune'; valid: console, jsonl, tensorboard, wandb, mlflow"));
  CHECK_THROWS_WITH(ppo::RunDir(tmp.sub("r"), true, {"jsonl", "jsonl"}), Catch::Contains("twice"));
  const ppo_test::Result t = ppo_test::run_ppo("train --config " + ppo_test::paths().source_dir +
                                               "/configs/regression_tiny.yaml 'trainer.logger=[console,comet]'");
  CHECK(t.status == 2);
  CHECK_THAT(t.output, Catch::Contains("error: ") && Catch::Contains("unknown value 'comet'"));
}

TEST_CASE("tensorboard: a run, a crash and a resume read back by TensorBoard equal metrics.jsonl",
          "[cpu][tensorboard][ref]") {
  ppo_test::TempDir tmp("ppo_tb_run");
  const std::string run = tmp.sub("run");
  const std::string common = "train --config " + ppo_test::paths().source_dir +
                             "/configs/regression_tiny.yaml trainer.output_dir=" + run +
                             " trainer.save_freq=4 trainer.test_freq=3 trainer.log_freq=100";
  ppo_test::Result a = ppo_test::run_ppo(common + " trainer.total_training_steps=6");
  INFO(a.output);
  REQUIRE(a.status == 0);
  std::vector<std::string> event_files;
  for (const auto& e : fs::directory_iterator(run))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) event_files.push_back(e.path().string());
  REQUIRE(event_files.size() == 1);
  const size_t first = require_same_scalars(read_jsonl(run + "/metrics.jsonl"), tensorboard_scalars(run, tmp));
  CHECK(first > 6 * 20);  // steps 0..6, tens of metrics each

  // The run "crashed" after step 6 with its last checkpoint at step 4: the resume keeps steps 0..4, sets 5 and 6
  // aside (metrics.orphaned.jsonl, orphaned/) and appends 5..8 to the same event file.
  ppo::remove_tree(run + "/checkpoints/global_step_6");
  std::ofstream(run + "/checkpoints/latest_checkpointed_iteration.txt") << "4\n";
  ppo_test::Result b = ppo_test::run_ppo(common + " trainer.total_training_steps=8");
  INFO(b.output);
  REQUIRE(b.status == 0);
  REQUIRE(b.output.find("resumed from") != std::string::npos);
  std::vector<std::string> after;
  for (const auto& e : fs::directory_iterator(run))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) after.push_back(e.path().string());
  CHECK(after == event_files);
  const std::vector<json> jsonl = read_jsonl(run + "/metrics.jsonl");
  REQUIRE(jsonl.back().at("training/global_step") == 8);
  const size_t resumed = require_same_scalars(jsonl, tensorboard_scalars(run, tmp));
  CHECK(resumed > first);
  const std::vector<json> orphaned = read_jsonl(run + "/metrics.orphaned.jsonl");
  REQUIRE(orphaned.size() == 2);  // steps 5 and 6 of the first run
  require_same_scalars(orphaned, tensorboard_scalars(run + "/orphaned", tmp));

  // A fresh run in the used directory moves the history aside: previous-1/ and metrics.previous-1.jsonl.
  ppo_test::Result c = ppo_test::run_ppo(common + " trainer.total_training_steps=2 trainer.resume_mode=disable");
  INFO(c.output);
  REQUIRE(c.status == 0);
  require_same_scalars(read_jsonl(run + "/metrics.previous-1.jsonl"), tensorboard_scalars(run + "/previous-1", tmp));
  require_same_scalars(read_jsonl(run + "/metrics.jsonl"), tensorboard_scalars(run, tmp));
}
