// Parquet data files (tasks/parquet.h): ppo.cpp's writer and reader against each other, damaged files, and [ref]
// against files pandas, `datasets` and pyarrow write (tests/reference/verl_parquet.py), value for value equal to the
// JSONL pandas writes from the same frame.
#include <catch2/catch.hpp>

#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/jsonl.h"
#include "tasks/datasets.h"
#include "tasks/parquet.h"
#include "tasks/reward.h"
#include "tasks/task.h"
#include "tests/reference/reference.h"
#include "tests/temp_dir.h"
#include "tests/text_file.h"
#include "tests/usage_error.h"
#include "text/tokenizers.h"
#include "train/prompts.h"

using Catch::Contains;
using nlohmann::json;
using ppo_test::usage_error_message;

namespace {

std::vector<json> read_parquet(const std::string& path) {
  std::vector<json> records;
  ppo::for_each_parquet_record(path, [&](const json& record, int64_t row) {
    CHECK(row == static_cast<int64_t>(records.size()));
    records.push_back(record);
  });
  return records;
}

// Equal as JSON text: a whole number stays whole, a float a float (nlohmann's == takes 1 for 1.0).
void check_same_records(const std::vector<json>& got, const std::vector<json>& expected) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("row " << i);
    CHECK(got[i].dump() == expected[i].dump());
  }
}

void check_same_samples(const std::vector<ppo::TaskSample>& a, const std::vector<ppo::TaskSample>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].origin << " and " << b[i].origin);
    CHECK(a[i].prompt == b[i].prompt);
    CHECK(a[i].messages.dump() == b[i].messages.dump());
    CHECK(a[i].prompt_is_chat == b[i].prompt_is_chat);
    CHECK(a[i].ground_truth.dump() == b[i].ground_truth.dump());
    CHECK(a[i].data_source == b[i].data_source);
    CHECK(a[i].extra_info.dump() == b[i].extra_info.dump());
    CHECK(a[i].answer == b[i].answer);
    CHECK(a[i].index == b[i].index);
    CHECK(a[i].difficulty == b[i].difficulty);
  }
}

}  // namespace

TEST_CASE("a .parquet data file is read where the build has Parquet, else one error says how to build with it",
          "[tasks][data]") {
  ppo_test::TempDir dir("parquet_or_not");
  const std::string path = dir.sub("train.parquet");
  auto task = ppo::make_task("reverse");
  const std::vector<ppo::TaskSample> samples = task->generate(3, 2, 2, 1);
  if (!ppo::parquet_supported()) {
    for (const auto& call : std::vector<std::function<void()>>{[&] { ppo::write_samples(*task, samples, path); },
                                                               [&] { ppo::load_samples(*task, path); }})
      CHECK_THAT(usage_error_message(call),
                 Contains(path + ": this build of ppo reads and writes no Parquet") && Contains("pyarrow==22.0.0"));
    return;
  }
  ppo::write_samples(*task, samples, path);
  CHECK(ppo::load_samples(*task, path).size() == samples.size());
}

TEST_CASE("Parquet written by ppo reads back as the same JSON: nested structs, lists, nulls, numbers",
          "[tasks][parquet]") {
  REQUIRE(ppo::parquet_supported());  // [parquet] cases are registered only in builds with Parquet
  ppo_test::TempDir dir("parquet_round_trip");
  const std::string path = dir.sub("records.parquet");
  const std::vector<json> records = {
      {{"s", "plain ASCII"},
       {"i", 4611686018427387904},  // 2^62
       {"f", 0.1},
       {"b", true},
       {"list", {1, 2, 3}},
       {"steps", {{{"k", "a"}, {"v", 1}}, {{"k", "b"}, {"v", 2}}}},
       {"meta", {{"source", "x"}, {"depth", {{"level", 2}}}}},
       {"mixed", 1}},
      {{"s", "Zoë, 日本語, 🙂"},
       {"i", -4611686018427387904},
       {"f", -2.5e-300},
       {"b", false},
       {"list", json::array()},
       {"steps", json::array()},
       {"meta", {{"source", nullptr}, {"depth", nullptr}}},
       {"mixed", 2.5}},
      {{"s", nullptr}, {"i", nullptr}, {"list", nullptr}, {"meta", nullptr}, {"mixed", nullptr}, {"extra", "late"}},
  };
  ppo::write_parquet(records, path);
  const std::vector<json> back = read_parquet(path);
  REQUIRE(back.size() == 3);
  std::vector<json> expected = records;
  // A column has one type: whole numbers beside fractional ones become doubles; a key a record lacks is null.
  expected[0]["mixed"] = 1.0;
  expected[2]["f"] = expected[2]["b"] = expected[2]["steps"] = nullptr;
  for (int r : {0, 1}) expected[r]["extra"] = nullptr;
  check_same_records(back, expected);
}

TEST_CASE("writing Parquet refuses what has no column type, naming the record and the field", "[tasks][parquet]") {
  REQUIRE(ppo::parquet_supported());  // [parquet] cases are registered only in builds with Parquet
  ppo_test::TempDir dir("parquet_write_errors");
  const std::string path = dir.sub("out.parquet");
  CHECK_THAT(usage_error_message([&] {
               ppo::write_parquet({{{"a", {{"b", 1}}}}, {{"a", {{"b", "x"}}}}}, path);
             }),
             Contains("record 1: field 'a.b' holds a number in one record and a string in another"));
  CHECK_THAT(usage_error_message([&] {
               ppo::write_parquet({{{"a", json::object()}}}, path);
             }),
             Contains("field 'a' is an empty object"));
  CHECK_THAT(usage_error_message([&] { ppo::write_parquet({json::array({1})}, path); }),
             Contains("record 0 is not a JSON object"));
  CHECK_THAT(usage_error_message([&] {
               ppo::write_parquet({{{"n", 18446744073709551615ULL}}}, path);
             }),
             Contains("does not fit a 64-bit whole number"));
  CHECK_THAT(usage_error_message([&] {
               ppo::write_parquet({{{"a", 1}}}, dir.sub("no/such/dir/out.parquet"));
             }),
             Contains("cannot open for writing"));
}

TEST_CASE("a task's samples written as Parquet in veRL's layout train and score as the task's own records",
          "[tasks][parquet]") {
  REQUIRE(ppo::parquet_supported());  // [parquet] cases are registered only in builds with Parquet
  ppo_test::TempDir dir("parquet_tasks");
  for (const std::string name : {"kk", "reverse", "digit_sum"}) {
    INFO(name);
    auto task = ppo::make_task(name);
    const std::vector<ppo::TaskSample> samples = task->generate(12, 2, 4, 7);
    const std::string path = dir.sub(name + ".parquet");
    ppo::write_samples(*task, samples, path);
    const std::vector<ppo::TaskSample> back = ppo::load_samples(*task, path);
    REQUIRE(back.size() == samples.size());
    ppo::RewardConfig reward;
    ppo::Rewarder rewarder(reward, task->name());
    rewarder.check(back);
    for (size_t i = 0; i < back.size(); ++i) {
      CHECK(back[i].prompt == samples[i].prompt);
      CHECK(back[i].answer == samples[i].answer);
      CHECK(back[i].index == samples[i].index);
      CHECK(back[i].difficulty == samples[i].difficulty);
      CHECK(back[i].origin == path + ": row " + std::to_string(i));
      CHECK(back[i].data_source == (name == "kk" ? "kk_logic" : name));
      // The reward the data_source picks scores the reference answer as the task does.
      const ppo::Score own = task->score(samples[i], samples[i].answer);
      const ppo::Score read = rewarder.score({{&back[i], back[i].prompt, samples[i].answer}}).front();
      CHECK(read.score == own.score);
      CHECK(read.correct == own.correct);
    }
  }
}

TEST_CASE("data.train_files takes a list of JSONL and Parquet files, read in order", "[tasks][parquet]") {
  REQUIRE(ppo::parquet_supported());  // [parquet] cases are registered only in builds with Parquet
  ppo_test::TempDir dir("parquet_mixed");
  auto task = ppo::make_task("reverse");
  const std::vector<ppo::TaskSample> samples = task->generate(10, 2, 4, 3);
  const std::vector<ppo::TaskSample> first(samples.begin(), samples.begin() + 4),
      rest(samples.begin() + 4, samples.end());
  ppo::write_samples(*task, first, dir.sub("a.parquet"));
  ppo::write_samples(*task, rest, dir.sub("b.jsonl"));
  ppo::Config config =
      ppo::load_config({}, {"data.train_files=[" + dir.sub("a.parquet") + ", " + dir.sub("b.jsonl") + "]"});
  REQUIRE(config.data.train_files.size() == 2);
  const std::unique_ptr<ppo::Tokenizer> tokenizer = ppo::make_tokenizer(config.model.tokenizer);
  const std::vector<ppo::TaskSample> loaded = ppo::load_prompts(config, *task, *tokenizer, true);
  REQUIRE(loaded.size() == samples.size());
  for (size_t i = 0; i < samples.size(); ++i) CHECK(loaded[i].prompt == samples[i].prompt);
  CHECK(loaded[3].origin == dir.sub("a.parquet") + ": row 3");
  CHECK(loaded[4].origin == dir.sub("b.jsonl") + ":1");
  // One file is still a one-element list, and an empty value generates the prompts.
  CHECK(ppo::load_config({}, {"data.train_files=" + dir.sub("b.jsonl")}).data.train_files.size() == 1);
  CHECK(ppo::load_config({}, {"data.train_files="}).data.train_files.empty());
}

TEST_CASE("a damaged Parquet file is an error or reads as it was, never a crash or other rows", "[tasks][parquet]") {
  REQUIRE(ppo::parquet_supported());  // [parquet] cases are registered only in builds with Parquet
  ppo_test::TempDir dir("parquet_damaged");
  auto task = ppo::make_task("kk");
  const std::string path = dir.sub("kk.parquet");
  ppo::write_samples(*task, task->generate(6, 2, 3, 1), path);
  const std::vector<json> original = read_parquet(path);
  const std::string bytes = ppo_test::read_text(path);
  REQUIRE(bytes.size() > 200);
  const std::string damaged = dir.sub("damaged.parquet");
  for (size_t cut : {size_t{0}, size_t{3}, bytes.size() / 2, bytes.size() - 9, bytes.size() - 1}) {
    ppo_test::write_text(damaged, bytes.substr(0, cut));
    CHECK_THAT(usage_error_message([&] { read_parquet(damaged); }), Contains(damaged + ": "));
  }
  ppo_test::write_text(damaged, "{\"prompt\": \"JSON, not Parquet\"}\n");
  CHECK_THAT(usage_error_message([&] { read_parquet(damaged); }), Contains("not a Parquet file, or a damaged one"));
  // One byte changed in the pages (ppo writes a CRC with each): an error, or (a byte nothing reads) the same records.
  // The footer has no checksum: a changed byte there may rename a column or change a statistic unseen, so only
  // "no crash, and an error names the file" holds there.
  const uint32_t footer_length = static_cast<uint8_t>(bytes[bytes.size() - 8]) |
                                 static_cast<uint8_t>(bytes[bytes.size() - 7]) << 8 |
                                 static_cast<uint8_t>(bytes[bytes.size() - 6]) << 16 |
                                 static_cast<uint32_t>(static_cast<uint8_t>(bytes[bytes.size() - 5])) << 24;
  REQUIRE(footer_length + 12 < bytes.size());
  const size_t footer = bytes.size() - 8 - footer_length;
  int errors = 0, same = 0;
  for (size_t at = 4; at + 8 < bytes.size(); at += 5) {
    std::string changed = bytes;
    changed[at] = static_cast<char>(changed[at] ^ 0x5a);
    ppo_test::write_text(damaged, changed);
    std::vector<json> records;
    const std::string error = usage_error_message([&] { records = read_parquet(damaged); });
    if (!error.empty()) {
      CHECK_THAT(error, Contains(damaged));
      ++errors;
      continue;
    }
    if (at >= footer) continue;
    INFO("byte " << at << " changed, before the footer at " << footer);
    CHECK(records == original);
    ++same;
  }
  CHECK(errors > 0);
  INFO(errors << " errors, " << same << " unchanged reads");
}

TEST_CASE("Parquet written by pandas, datasets and pyarrow reads as the JSONL pandas writes from the same frame",
          "[tasks][parquet][ref]") {
  ppo_test::TempDir dir("parquet_ref");
  ppo_test::run_reference("verl_parquet.py", dir.sub("files") + " > /dev/null");
  auto task = ppo::make_task("reverse");
  for (const std::string name : {"gsm8k", "kk", "types", "nulls"}) {
    INFO(name);
    const std::string parquet = dir.sub("files/" + name + ".parquet"), jsonl = dir.sub("files/" + name + ".jsonl");
    check_same_records(read_parquet(parquet), ppo::read_jsonl(jsonl));
    if (name != "types") check_same_samples(ppo::load_samples(*task, parquet), ppo::load_samples(*task, jsonl));
  }
  // Rows break the record rules: the file, the row (from 0, as pandas numbers them) and the field.
  const std::string files = dir.sub("files/");
  CHECK_THAT(usage_error_message([&] { ppo::load_samples(*task, files + "bad_rows.parquet"); }),
             Contains(files + "bad_rows.parquet: row 3: field 'reward_model.ground_truth': is null"));
  CHECK_THAT(usage_error_message([&] { ppo::load_samples(*task, files + "no_prompt.parquet"); }),
             Contains(files + "no_prompt.parquet: row 0: missing field 'prompt' (data.prompt_key)"));
  CHECK_THAT(usage_error_message([&] { ppo::load_samples(*task, files + "unsupported.parquet"); }),
             Contains(files + "unsupported.parquet: column 'extra_info.when': type timestamp[ns] is not read"));
  for (const std::string name : {"not_parquet", "truncated"})
    CHECK_THAT(usage_error_message([&] { ppo::load_samples(*task, files + name + ".parquet"); }),
               Contains(files + name + ".parquet: not a Parquet file, or a damaged one"));
  // The other way: what ppo writes, pandas reads into the JSONL that ppo reads as the same samples.
  auto kk = ppo::make_task("kk");
  ppo::write_samples(*kk, kk->generate(9, 2, 4, 5), dir.sub("ppo.parquet"));
  ppo_test::run_reference("verl_parquet.py",
                          "convert " + dir.sub("ppo.parquet") + " " + dir.sub("ppo.jsonl") + " > /dev/null");
  check_same_samples(ppo::load_samples(*kk, dir.sub("ppo.parquet")), ppo::load_samples(*kk, dir.sub("ppo.jsonl")));
}
