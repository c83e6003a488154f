// Checked and atomic writes, checkpoint manifests, trainer_state.json, and the config loader's refusals.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/config.h"
#include "common/error.h"
#include "common/files.h"
#include "common/manifest.h"
#include "records/trainer_state.h"
#include "tasks/datasets.h"
#include "tasks/task.h"
#include "tests/paths.h"
#include "tests/temp_dir.h"
#include "tests/text_file.h"
#include "tests/usage_error.h"
#include "train/config_check.h"

namespace fs = std::filesystem;
using ppo_test::read_text;
using ppo_test::TempDir;
using ppo_test::usage_error_message;
using ppo_test::write_text;

TEST_CASE("write_file_atomic replaces a file whole and leaves no temporary", "[cpu][files]") {
  TempDir tmp;
  const std::string file = tmp.sub("metrics.jsonl");
  write_text(file, "old\n");
  ppo::write_file_atomic(file, "new\n");
  CHECK(read_text(file) == "new\n");
  CHECK_FALSE(ppo_test::temporary_left_beside(file));
  ppo::append_file(file, "more\n");
  CHECK(read_text(file) == "new\nmore\n");
  // A folder that does not exist: an IoError naming the file, nothing written.
  CHECK_THROWS_WITH(ppo::write_file_atomic(tmp.sub("no/such/file"), "x"), Catch::Contains(tmp.sub("no/such/file")));
  CHECK_THROWS_AS(ppo::append_file(tmp.sub("no/such/file"), "x"), ppo::IoError);
}

TEST_CASE("remove_tree removes a folder's tree, never through a link, and no source calls remove_all", "[cpu][files]") {
  TempDir tmp;
  const std::string tree = tmp.path.string() + "/tree", outside = tmp.path.string() + "/outside";
  fs::create_directories(tree + "/a/b/c");
  fs::create_directories(outside);
  write_text(tree + "/a/b/c/deep.txt", "x");
  write_text(tree + "/top.txt", "y");
  write_text(outside + "/keep.txt", "z");
  fs::create_directory_symlink(outside, tree + "/a/link");  // removing the tree removes the link only
  fs::create_symlink(outside + "/keep.txt", tree + "/file_link");
  std::error_code error;
  CHECK(ppo::remove_tree(tree, error));
  CHECK(!error);
  CHECK(!fs::exists(tree));
  CHECK(read_text(outside + "/keep.txt") == "z");
  CHECK(ppo::remove_tree(tree, error));  // a missing path is no error
  write_text(tmp.path.string() + "/plain.txt", "p");
  CHECK_FALSE(ppo::remove_tree(tmp.path.string() + "/plain.txt/below", error));  // a file is no folder: ENOTDIR
  CHECK(error.value() == ENOTDIR);
  CHECK_THROWS_AS(ppo::remove_tree(tmp.path.string() + "/plain.txt/below"), ppo::IoError);
  ppo::remove_tree(tmp.path.string() + "/plain.txt");  // a file alone
  CHECK(!fs::exists(tmp.path.string() + "/plain.txt"));

  // PyPI's LibTorch 2.x exports its own std::filesystem::remove_all, and a build where that copy is what our calls
  // bind to crashed (address 0): the sources call remove_tree instead.
  for (const char* folder : {"app", "common", "model", "parallel", "records", "rl", "rollout", "tasks", "train",
                             "workers", "bench", "tests"}) {
    for (const auto& entry : fs::recursive_directory_iterator(ppo_test::paths().source_dir + "/" + folder)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".cpp" && ext != ".h") continue;
      const std::string text = read_text(entry.path().string());
      INFO(entry.path().string());
      CHECK(text.find(std::string("remove_") + "all(") == std::string::npos);
    }
  }
}

TEST_CASE("a checkpoint manifest catches a flipped bit, a cut file and a missing one", "[cpu][files]") {
  TempDir tmp;
  const std::string dir = tmp.sub("global_step_2");
  fs::create_directories(dir);
  std::string weights(100000, '\0');
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<char>(i * 7919 % 251);
  write_text(dir + "/actor.pt", weights);
  write_text(dir + "/trainer_state.json", "{}\n");
  ppo::write_manifest(dir);
  REQUIRE(fs::exists(dir + "/manifest.json"));
  ppo::verify_manifest(dir);
  ppo::verify_manifest_entry(dir + "/actor.pt");

  std::string flipped = weights;
  flipped[54321] ^= 0x10;
  write_text(dir + "/actor.pt", flipped);
  CHECK_THAT(usage_error_message([&] { ppo::verify_manifest_entry(dir + "/actor.pt"); }),
             Catch::Contains(dir + "/actor.pt is damaged"));
  CHECK_THAT(usage_error_message([&] { ppo::verify_manifest(dir); }), Catch::Contains("actor.pt is damaged"));
  write_text(dir + "/actor.pt", weights.substr(0, 4096));
  CHECK_THAT(usage_error_message([&] { ppo::verify_manifest(dir); }), Catch::Contains("4096 bytes"));
  write_text(dir + "/actor.pt", weights);
  ppo::verify_manifest(dir);
  fs::remove(dir + "/trainer_state.json");
  CHECK_THAT(usage_error_message([&] { ppo::verify_manifest(dir); }), Catch::Contains("is missing"));
  write_text(dir + "/extra.pt", "x");
  CHECK_THAT(usage_error_message([&] { ppo::verify_manifest_entry(dir + "/extra.pt"); }),
             Catch::Contains("not listed"));
  write_text(dir + "/manifest.json", "[1, 2");
  CHECK_THAT(usage_error_message([&] { ppo::verify_manifest(dir); }), Catch::Contains("not a checkpoint manifest"));
  // A folder without a manifest: every checkpoint written now has one, so it is an error, unless checkpoints of an
  // earlier version are accepted unverified.
  fs::remove(dir + "/manifest.json");
  CHECK_THAT(usage_error_message([&] { ppo::verify_manifest(dir); }),
             Catch::Contains(dir + " has no manifest.json") &&
                 Catch::Contains("trainer.accept_checkpoints_without_manifest=true"));
  ppo::accept_checkpoints_without_manifest(true);
  ppo::verify_manifest(dir);
  ppo::verify_manifest_entry(dir + "/actor.pt");
  ppo::accept_checkpoints_without_manifest(false);
}

TEST_CASE("trainer_state.json: every missing, mistyped or out-of-range field is an error naming file and key",
          "[cpu][files]") {
  ppo::TrainerState state;
  state.global_step = 12;
  state.kl_coef = 0.05;
  state.actor_optimizer_steps = 24;
  state.critic_optimizer_steps = 24;
  state.data_seed = -3;
  state.sampler_epoch = 1;
  state.gen_batches = 17;
  const nlohmann::json good = ppo::trainer_state_json(state);
  const ppo::TrainerState back = ppo::parse_trainer_state(good.dump(), "f.json");
  CHECK(back.global_step == 12);
  CHECK(back.kl_coef == 0.05);
  CHECK(back.data_seed == -3);
  CHECK(back.gen_batches == 17);
  // A checkpoint from before dynamic sampling has no gen_batches: one generation batch per step.
  nlohmann::json older = good;
  older.erase("gen_batches");
  CHECK(ppo::parse_trainer_state(older.dump(), "f.json").gen_batches == 12);
  older["gen_batches"] = -1;
  CHECK_THAT(usage_error_message([&] { ppo::parse_trainer_state(older.dump(), "f.json"); }),
             Catch::Contains("f.json: key 'gen_batches'") && Catch::Contains("outside [0, 2^53)"));
  const std::vector<std::tuple<std::string, nlohmann::json, std::string>> cases = {
      {"global_step", -5, "outside [0, 2^53)"},
      {"global_step", 2.5, "must be a whole number"},
      {"global_step", 3.0, "must be a whole number"},
      {"global_step", "7", "must be a whole number"},
      {"global_step", 18446744073709551615ull, "outside [0, 2^53)"},
      {"global_step", nullptr, "must be a whole number"},
      {"actor_optimizer_steps", -1, "outside"},
      {"critic_optimizer_steps", true, "must be a whole number"},
      {"sampler_epoch", nlohmann::json::array(), "must be a whole number"},
      {"data_seed", 1.5, "must be a whole number"},
      {"kl_coef", -0.1, "finite number >= 0"},
      {"kl_coef", "0.1", "finite number >= 0"},
  };
  for (const auto& [key, value, expected] : cases) {
    nlohmann::json bad = good;
    bad[key] = value;
    INFO(key << " = " << value.dump());
    CHECK_THAT(usage_error_message([&] { ppo::parse_trainer_state(bad.dump(), "ckpt/trainer_state.json"); }),
               Catch::Contains("ckpt/trainer_state.json: key '" + key + "'") && Catch::Contains(expected));
    bad.erase(key);
    CHECK_THAT(usage_error_message([&] { ppo::parse_trainer_state(bad.dump(), "ckpt/trainer_state.json"); }),
               Catch::Contains("key '" + key + "' is missing"));
  }
  // reward_model.normalize's moments: absent before any (and in older files), else checked.
  CHECK(back.reward_moments.count == 0);
  CHECK_FALSE(good.contains("reward_moments"));
  state.reward_moments = {40, -0.25, 1.5};
  CHECK(ppo::parse_trainer_state(ppo::trainer_state_json(state).dump(), "f.json").reward_moments ==
        state.reward_moments);
  for (const auto& [moments, expected] : std::vector<std::pair<nlohmann::json, std::string>>{
           {{{"count", 3}, {"mean", 0.5}, {"var", -1.0}}, "key 'reward_moments.var' must be a finite number >= 0"},
           {{{"count", 3}, {"mean", "x"}, {"var", 1.0}}, "key 'reward_moments.mean' must be a finite number"},
           {{{"count", -3}, {"mean", 0.5}, {"var", 1.0}}, "reward_moments: key 'count' is -3"},
           {{{"count", 3}, {"var", 1.0}}, "key 'mean' is missing"},
           {nlohmann::json::array(), "key 'reward_moments' must be an object"}}) {
    nlohmann::json bad = good;
    bad["reward_moments"] = moments;
    INFO(moments.dump());
    CHECK_THAT(usage_error_message([&] { ppo::parse_trainer_state(bad.dump(), "f.json"); }),
               Catch::Contains("f.json") && Catch::Contains(expected));
  }
  CHECK_THAT(usage_error_message([&] { ppo::parse_trainer_state("{\"global_step\": 1", "s.json"); }),
             Catch::Contains("s.json: not valid JSON"));
  CHECK_THAT(usage_error_message([&] { ppo::parse_trainer_state("[1]", "s.json"); }),
             Catch::Contains("not a JSON object"));
  CHECK_THAT(usage_error_message([&] { ppo::parse_trainer_state(R"({"global_step": 2, "kind": "dpo"})", "s.json"); }),
             Catch::Contains("s.json: key 'kind' must be \"ppo\", \"sft\" or \"rm\""));
}

TEST_CASE("the config loader refuses duplicate keys, several documents, folders and invalid UTF-8", "[cpu][files]") {
  TempDir tmp;
  const auto load = [&](const std::string& text) {
    write_text(tmp.sub("c.yaml"), text);
    return usage_error_message([&] { ppo::load_config({tmp.sub("c.yaml")}, {}); });
  };
  CHECK_THAT(load("actor:\n  optim:\n    lr: 0.1\n    lr: 0.2\n"),
             Catch::Contains("c.yaml:4: key 'lr' is given twice"));
  CHECK_THAT(load("data:\n  seed: 1\ndata:\n  seed: 2\n"), Catch::Contains("c.yaml:3: key 'data' is given twice"));
  CHECK_THAT(load("data:\n  seed: 1\n---\ndata:\n  seed: 2\n"), Catch::Contains("holds 2 YAML documents"));
  CHECK_THAT(load("data:\n  task: \"k\xff\xfe\"\n"), Catch::Contains("c.yaml:2: not valid UTF-8"));
  CHECK_THAT(load("data:\n  task: \"\xed\xa0\x80\"\n"), Catch::Contains("not valid UTF-8"));  // a surrogate
  CHECK_THAT(load("data:\n  task: \"\xc0\xaf\"\n"), Catch::Contains("not valid UTF-8"));      // an overlong form
  CHECK(load("data:\n  task: \"k\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"\n") == "");            // valid UTF-8 loads
  CHECK(load("---\ndata:\n  seed: 3\n") == "");                                               // one marked document
  CHECK(load("# only a comment\n") == "");
  CHECK(load("---\n~\n") == "");
  // yaml-cpp's LoadAll looped forever on ",", and its Load reads it (and a first line ", a: 1") as empty: errors.
  CHECK_THAT(load(","), Catch::Contains("does not parse as YAML"));
  CHECK_THAT(load("# a comment---\n, stage 2 of 2: 6\n  train_size: 128\nmodel:\n  hidden_size: 64\n"),
             Catch::Contains("does not parse as YAML"));
  CHECK_THAT(usage_error_message([&] { ppo::load_config({tmp.path.string()}, {}); }), Catch::Contains("is a folder"));
  CHECK_THAT(usage_error_message([&] { ppo::load_config({}, {"actor.optim.lr=.inf"}); }),
             Catch::Contains("not a finite number"));
  CHECK_THAT(usage_error_message([&] { ppo::load_config({}, {"algorithm.lam=inf"}); }),
             Catch::Contains("not a finite number"));
  // An override starting with a NUL byte, which yaml-cpp reads as UTF-32 and turns into bytes that are not UTF-8 (the
  // fuzzer's finding: they reached the config printer and threw there); a lone surrogate escape yaml-cpp refuses.
  CHECK_THAT(load("trainer:\n  output_dir: \"\\uD800\"\n"), Catch::Contains("c.yaml:2:22: YAML syntax error"));
  const std::string nul_first = std::string("trainer.logger=\x01", 16) + std::string(3, '\0') + "~~~~~~~~alse";
  CHECK_THAT(usage_error_message([&] { ppo::load_config({}, {nul_first}); }),
             Catch::Contains("trainer.logger: the value is not valid UTF-8"));
}

TEST_CASE("check_config refuses numbers outside their range, naming the key and the range", "[cpu][files]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"actor.optim.lr=-0.001", "actor.optim.lr=-0.001 is out of range: it must lie in [0, inf)"},
      {"critic.optim.lr=-1", "critic.optim.lr=-1 is out of range"},
      {"actor.clip_ratio=0", "actor.clip_ratio=0 is out of range: it must lie in (0, inf)"},
      {"actor.clip_ratio=-0.2", "actor.clip_ratio=-0.2"},
      {"actor.grad_clip=0", "actor.grad_clip=0 is out of range"},
      {"critic.grad_clip=-1", "critic.grad_clip=-1"},
      {"algorithm.gamma=1.5", "algorithm.gamma=1.5 is out of range: it must lie in [0, 1]"},
      {"algorithm.gamma=-0.1", "algorithm.gamma=-0.1"},
      {"algorithm.lam=2", "algorithm.lam=2"},
      {"actor.optim.betas=[0.9, 1.0]", "actor.optim.betas=1 is out of range: it must lie in [0, 1)"},
      {"actor.optim.eps=0", "actor.optim.eps=0"},
      {"trainer.save_freq=-1", "trainer.save_freq=-1"},
      {"trainer.max_skipped_steps=-2", "trainer.max_skipped_steps=-2"},
      {"parallel.timeout_s=-5", "parallel.timeout_s=-5"},
      {"algorithm.kl_ctrl.kl_coef=-0.01", "algorithm.kl_ctrl.kl_coef=-0.01"},
  };
  for (const auto& [assignment, expected] : cases) {
    INFO(assignment);
    CHECK_THAT(usage_error_message([&] {
                 ppo::Config c = ppo::load_config({}, {assignment});
                 ppo::check_config(c, 1);
               }),
               Catch::Contains(expected));
  }
  ppo::Config edges = ppo::load_config({}, {"algorithm.gamma=1", "algorithm.lam=0", "actor.optim.lr=0"});
  CHECK_NOTHROW(ppo::check_config(edges, 1));  // the closed ends are valid
}

TEST_CASE("records, trainer_state.json and manifests nested past the JSON depth limit are errors, not stack overflows",
          "[cpu][files]") {
  TempDir tmp;
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  // A veRL record whose ground truth is 200,000 arrays deep: copying it recursed once per level (SIGSEGV).
  write_text(tmp.sub("deep.jsonl"),
             R"({"prompt": "q", "data_source": "x", "reward_model": {"ground_truth": )" + deep + "}}\n");
  const auto task = ppo::make_task("reverse");
  CHECK_THAT(usage_error_message([&] { ppo::load_samples(*task, tmp.sub("deep.jsonl")); }),
             Catch::Contains("deep.jsonl:1: JSON nested deeper than 100 levels"));
  CHECK_THAT(usage_error_message([&] { ppo::parse_trainer_state("{\"global_step\": " + deep + "}", "s.json"); }),
             Catch::Contains("s.json: JSON nested deeper than 100 levels"));
  const std::string nested_ok = std::string(90, '[') + std::string(90, ']');
  write_text(tmp.sub("ok.jsonl"),
             R"({"prompt": "q", "data_source": "x", "reward_model": {"ground_truth": )" + nested_ok + "}}\n");
  CHECK(ppo::load_samples(*task, tmp.sub("ok.jsonl")).size() == 1);
  // A whole-number field given as 1e300 (converting it to an integer was undefined behaviour).
  write_text(tmp.sub("huge.jsonl"),
             R"({"prompt": "1>", "answer": "1", "ground_truth": {"target": "1"}, "difficulty": 1e300})"
             "\n");
  CHECK_THAT(usage_error_message([&] { ppo::load_samples(*task, tmp.sub("huge.jsonl")); }),
             Catch::Contains("field 'difficulty': expected a whole number, got 1e+300"));
  fs::create_directories(tmp.sub("ckpt"));
  write_text(tmp.sub("ckpt/manifest.json"), "{\"files\": " + deep + "}");
  CHECK_THAT(usage_error_message([&] { ppo::verify_manifest(tmp.sub("ckpt")); }),
             Catch::Contains("not a checkpoint manifest"));
}
