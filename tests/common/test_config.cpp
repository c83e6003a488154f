// Config: layering, strictness, error messages, the documented defaults file, check_config().
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>

#include "common/config.h"
#include "common/error.h"
#include "parallel/context.h"
#include "records/run_dir.h"
#include "rl/algorithms.h"
#include "rl/kl_controller.h"
#include "tasks/datasets.h"
#include "tasks/task.h"
#include "tests/paths.h"
#include "tests/temp_dir.h"
#include "train/config_check.h"
#include "train/registry_keys.h"
#include "workers/optimizer.h"

namespace {

std::string write_temp(const ppo_test::TempDir& tmp, const std::string& name, const std::string& text) {
  std::string path = tmp.sub(name);
  std::ofstream(path) << text;
  return path;
}

std::string usage_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const ppo::UsageError& e) {
    return e.what();
  }
  return "(no UsageError)";
}

}  // namespace

TEST_CASE("layering: defaults <- files in order <- overrides", "[cpu][config]") {
  ppo_test::TempDir tmp;
  ppo::Config defaults;
  auto a = write_temp(tmp, "a.yaml", "data:\n  train_batch_size: 32\n  seed: 5\nactor:\n  optim:\n    lr: 0.5\n");
  auto b = write_temp(tmp, "b.yaml", "data:\n  train_batch_size: 64\n");
  ppo::Config c = ppo::load_config({a, b}, {"data.seed=9"});
  CHECK(c.data.train_batch_size == 64);                                    // b overrides a
  CHECK(c.data.seed == 9);                                                 // the override beats both files
  CHECK(c.actor.optim.lr == 0.5);                                          // nested section from a
  CHECK(c.data.max_response_length == defaults.data.max_response_length);  // untouched default
  ppo::Config d = ppo::load_config({b, a}, {});
  CHECK(d.data.train_batch_size == 32);  // order matters: a is last now
}

TEST_CASE("overrides parse every type strictly", "[cpu][config]") {
  ppo::Config c =
      ppo::load_config({}, {"actor.ppo_mini_batch_size=64", "actor.optim.betas=[0.8, 0.95]",
                            "trainer.val_before_train=true", "algorithm.adv_estimator=grpo", "actor.optim.lr=3e-6"});
  CHECK(c.actor.ppo_mini_batch_size == 64);
  CHECK(c.actor.optim.betas == std::vector<double>{0.8, 0.95});
  CHECK(c.trainer.val_before_train);
  CHECK(c.algorithm.adv_estimator == "grpo");
  CHECK(c.actor.optim.lr == 3e-6);
  CHECK_THROWS_AS(ppo::load_config({}, {"data.train_batch_size=6.5"}), ppo::UsageError);
  CHECK_THROWS_AS(ppo::load_config({}, {"trainer.val_before_train=maybe"}), ppo::UsageError);
  CHECK_THROWS_AS(ppo::load_config({}, {"actor.optim.betas=0.9"}), ppo::UsageError);
  CHECK_THROWS_AS(ppo::load_config({}, {"actor.optim.lr=fast"}), ppo::UsageError);
  CHECK_THROWS_AS(ppo::load_config({}, {"no_equals_sign"}), ppo::UsageError);
}

TEST_CASE("an unknown key names it and suggests the closest valid key", "[cpu][config]") {
  ppo_test::TempDir tmp;
  std::string m = usage_message([] { ppo::load_config({}, {"actor.ppo_mini_batchsize=64"}); });
  CHECK_THAT(m, Catch::Contains("'actor.ppo_mini_batchsize'"));
  CHECK_THAT(m, Catch::Contains("did you mean actor.ppo_mini_batch_size?"));
  // A bare leaf in the wrong place is matched by its leaf name.
  CHECK(ppo::closest_key("critic.clip_ratio_c") == "actor.clip_ratio_c");
  auto file = write_temp(tmp, "unknown.yaml", "actor:\n  ppo_epoch: 2\n");
  m = usage_message([&] { ppo::load_config({file}, {}); });
  CHECK_THAT(m, Catch::Contains(file));
  CHECK_THAT(m, Catch::Contains("did you mean actor.ppo_epochs?"));
}

TEST_CASE("a wrong type names key, value and expected type", "[cpu][config]") {
  ppo_test::TempDir tmp;
  std::string m = usage_message([] { ppo::load_config({}, {"data.train_batch_size=abc"}); });
  CHECK(m == "data.train_batch_size: 'abc' is not an integer");
  auto file = write_temp(tmp, "type.yaml", "trainer:\n  save_freq: often\n");
  m = usage_message([&] { ppo::load_config({file}, {}); });
  CHECK(m == file + ": trainer.save_freq: 'often' is not an integer");
  auto section = write_temp(tmp, "section.yaml", "actor: 3\n");
  CHECK_THAT(usage_message([&] { ppo::load_config({section}, {}); }), Catch::Contains("'actor' is a section"));
}

TEST_CASE("YAML syntax errors name file and line, a missing file names its path", "[cpu][config]") {
  ppo_test::TempDir tmp;
  auto file = write_temp(tmp, "syntax.yaml", "data:\n  seed: 1\n  train_batch_size: [4\n");
  std::string m = usage_message([&] { ppo::load_config({file}, {}); });
  CHECK_THAT(m, Catch::StartsWith(file + ":"));
  CHECK_THAT(m, Catch::Contains("YAML syntax error"));
  auto tabbed = write_temp(tmp, "indent.yaml", "data:\n  seed: 1\n bad: [\n");
  CHECK_THAT(usage_message([&] { ppo::load_config({tabbed}, {}); }), Catch::Contains(tabbed + ":3:"));
  m = usage_message([] { ppo::load_config({"/nonexistent/dir/x.yaml"}, {}); });
  CHECK_THAT(m, Catch::Contains("/nonexistent/dir/x.yaml"));
}

TEST_CASE("configs/ppo_trainer.yaml documents every key with its default", "[cpu][config]") {
  ppo_test::TempDir tmp;
  std::string path = ppo_test::paths().source_dir + "/configs/ppo_trainer.yaml";
  ppo::Config defaults;
  ppo::Config from_file = ppo::load_config({path}, {});
  auto expected = ppo::config_fields(defaults);
  auto actual = ppo::config_fields(from_file);
  REQUIRE(expected.size() == actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO(expected[i].key);
    CHECK(actual[i].get_text() == expected[i].get_text());
  }
  // Every key is present in the file with a comment (so a key missing from the file cannot hide behind its default).
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& f : expected) {
    std::string leaf = f.key.substr(f.key.rfind('.') + 1);
    INFO(f.key);
    CHECK(text.find(leaf + ": " + f.get_text() + "  # " + f.help) != std::string::npos);
  }
  // The printed config reads back to the same config.
  auto round = write_temp(tmp, "round.yaml", ppo::config_to_yaml(from_file));
  ppo::Config again = ppo::load_config({round}, {});
  auto again_fields = ppo::config_fields(again);
  for (size_t i = 0; i < expected.size(); ++i) CHECK(again_fields[i].get_text() == expected[i].get_text());
}

TEST_CASE("every experiment config loads and passes check_config on one rank", "[cpu][config]") {
  for (const char* name : {"regression_tiny.yaml"}) {
    INFO(name);
    ppo::Config c = ppo::load_config({ppo_test::paths().source_dir + "/configs/" + name}, {});
    CHECK_NOTHROW(ppo::check_config(c, 1));
  }
}

TEST_CASE("--help and ppo config --comments list every estimator and policy loss row with its source",
          "[cpu][config]") {
  ppo::Config c;
  const std::string yaml = ppo::config_to_yaml(c, /*comments=*/true, ppo::registry_choices());
  const std::string help = ppo::config_help(ppo::registry_choices());
  for (const ppo::AdvEstimatorSpec& e : ppo::adv_estimators()) {
    INFO(e.name);
    CHECK_THAT(yaml, Catch::Contains(std::string(e.name) + " (" + e.help + "; " + e.source + ")"));
    CHECK_THAT(help, Catch::Contains(std::string(e.name) + ": " + e.help + "; " + e.source));
  }
  for (const ppo::PolicyLossSpec& l : ppo::policy_losses()) {
    INFO(l.name);
    CHECK_THAT(yaml, Catch::Contains(std::string(l.name) + " (" + l.help + "; " + l.source + ")"));
    CHECK_THAT(help, Catch::Contains(std::string(l.name) + ": " + l.help + "; " + l.source));
  }
}

TEST_CASE("check_config accepts every name each registry lists", "[cpu][config]") {
  // One registry per variant: the names it advertises are exactly the ones validation takes.
  const auto accepts = [](const std::string& key, const std::string& value, std::vector<std::string> extra = {}) {
    extra.push_back(key + "=" + value);
    ppo::Config c = ppo::load_config({ppo_test::paths().source_dir + "/configs/regression_tiny.yaml"}, extra);
    INFO(key << "=" << value);
    CHECK_NOTHROW(ppo::check_config(c, 1));
  };
  for (const auto& name : ppo::adv_estimator_names()) accepts("algorithm.adv_estimator", name);
  for (const auto& name : ppo::kl_estimator_names()) {
    accepts("algorithm.kl_penalty", name);
    accepts("actor.kl_loss_type", name);
  }
  for (const auto& name : ppo::loss_agg_mode_names()) {
    accepts("actor.loss_agg_mode", name);
    accepts("critic.loss_agg_mode", name);
  }
  for (const auto& name : ppo::kl_controller_names()) accepts("algorithm.kl_ctrl.type", name);
  for (const auto& name : ppo::warmup_style_names()) accepts("actor.optim.warmup_style", name);
  for (const auto& name : ppo::task_names()) accepts("data.task", name);
  for (const auto& name : ppo::logger_names()) accepts("trainer.logger", "[" + name + "]");
  for (const auto& name : ppo::Context::backend_names()) accepts("parallel.backend", name);
}

TEST_CASE("every registry key of the schema is one row of registry_keys, which refuses a name no registry lists",
          "[cpu][config]") {
  ppo::Config scratch;
  std::set<std::string> schema, table;
  for (const ppo::ConfigField& f : ppo::config_fields(scratch))
    if (f.registry) schema.insert(f.key);
  for (const ppo::RegistryKey& row : ppo::registry_keys()) {
    CHECK(table.insert(row.key).second);  // once
    CHECK_FALSE(row.names().empty());
    ppo::Config c;
    ppo::apply_override(c, row.key + (row.key == "trainer.logger" ? "=[no_such_name]" : "=no_such_name"));
    INFO(row.key);
    const std::string message = usage_message([&] { row.check(c); });
    CHECK_THAT(message, Catch::StartsWith(row.key + ": unknown"));
    CHECK_THAT(message, Catch::Contains("no_such_name"));
    CHECK_THAT(message, Catch::Contains(row.names().front().name));  // the valid names, from the registry
  }
  CHECK(schema == table);
  const ppo::KeyChoices choices = ppo::registry_choices();
  CHECK(choices.size() == table.size());
}

TEST_CASE("check_config: equal chunks per rank, with the nearest valid values", "[cpu][config]") {
  ppo::Config c = ppo::load_config(
      {}, {"data.train_batch_size=2", "actor.ppo_mini_batch_size=2", "critic.ppo_mini_batch_size=2", "rollout.n=1",
           "actor.ppo_micro_batch_size_per_gpu=1", "critic.ppo_micro_batch_size_per_gpu=1"});
  std::string m = usage_message([&] { ppo::check_config(c, 4); });
  CHECK_THAT(m, Catch::StartsWith("data.train_batch_size=2 cannot be split into equal chunks over 4 ranks: use a "
                                  "multiple of 4 (4, 8, ...)"));
  CHECK_THAT(m, Catch::Contains("parallel.pad_to_world=true"));
  c.parallel.pad_to_world = true;
  const ppo::RunShape four = ppo::check_config(c, 4);
  CHECK(four.padded_train_batch_size == 4);
  CHECK(four.prompts_per_rank == 1);

  ppo::Config d =
      ppo::load_config({}, {"data.train_batch_size=384", "actor.ppo_mini_batch_size=96",
                            "critic.ppo_mini_batch_size=96", "rollout.n=4", "actor.ppo_micro_batch_size_per_gpu=5"});
  m = usage_message([&] { ppo::check_config(d, 64); });
  CHECK(m ==
        "actor.ppo_mini_batch_size=96 cannot be split into equal chunks over 64 ranks (data.train_batch_size=384); "
        "nearest valid: 64 or 128, or set parallel.pad_to_world=true");
  d.actor.ppo_mini_batch_size = 128;
  d.critic.ppo_mini_batch_size = 128;
  m = usage_message([&] { ppo::check_config(d, 64); });
  // 128 prompts / 64 ranks x 4 = 8 responses per rank; 5 does not divide it.
  CHECK_THAT(m, Catch::StartsWith("actor.ppo_micro_batch_size_per_gpu=5 does not divide the per-rank mini-batch"));
  CHECK_THAT(m, Catch::Contains("nearest valid: 4 or 8"));
  d.actor.ppo_micro_batch_size_per_gpu = 8;
  d.critic.ppo_micro_batch_size_per_gpu = 4;
  const ppo::RunShape wide = ppo::check_config(d, 64);
  CHECK(wide.actor_mini_batches == 3);
  CHECK(wide.actor_micro_batches == 1);
  CHECK(wide.critic_micro_batches == 2);
  CHECK(wide.responses_per_rank == 24);

  // A micro-batch larger than a rank's mini-batch (veRL's zero-micro-batches NaN case) is a memory knob set too high:
  // it is clamped to what the rank holds, with a note, and the arithmetic is that of one micro-batch.
  ppo::Config e = ppo::load_config({}, {"data.train_batch_size=8", "actor.ppo_mini_batch_size=8", "rollout.n=1",
                                        "actor.ppo_micro_batch_size_per_gpu=4", "critic.ppo_mini_batch_size=8"});
  const ppo::RunShape clamped = ppo::check_config(e, 4);
  CHECK(e.actor.ppo_micro_batch_size_per_gpu == 4);  // the config as given; the size used is derived
  CHECK(clamped.actor_micro_batch_size == 2);
  CHECK(clamped.actor_micro_batches == 1);
  REQUIRE(clamped.notes.size() == 2);  // the critic's default micro-batch too
  CHECK(clamped.notes[0] ==
        "actor.ppo_micro_batch_size_per_gpu=4 is more than a rank holds per mini-batch (actor.ppo_mini_batch_size / 4 "
        "ranks x rollout.n=1 = 2 responses); using 2, which changes no numbers");
  CHECK_THAT(ppo::describe_batch(e, clamped),
             Catch::Contains("note: actor.ppo_micro_batch_size_per_gpu=4 is more than"));
}

TEST_CASE("check_config: names, token budgets and ranges", "[cpu][config]") {
  // A single key's range is load_config's, a relation check_config's: either way one UsageError names the key.
  auto check = [](std::vector<std::string> overrides, const std::string& expected) {
    INFO(expected);
    CHECK_THAT(usage_message([&] { ppo::check_config(ppo::load_config({}, overrides), 1); }),
               Catch::Contains(expected));
  };
  check({"algorithm.adv_estimator=ppo"}, "valid: gae, grpo, reinforce_plus_plus, rloo");
  check({"actor.loss_agg_mode=mean"}, "actor.loss_agg_mode: unknown loss aggregation mode 'mean'");
  check({"trainer.logger=[console,neptune]"},
        "trainer.logger: unknown value 'neptune'; valid: console, jsonl, tensorboard, wandb, mlflow");
  check({"model.attn_implementation=flash"},
        "model.attn_implementation: unknown value 'flash'; valid: auto, eager, sdpa");
  check({"actor.use_dynamic_bsz=true", "actor.ppo_max_token_len_per_gpu=10"},
        "actor.ppo_max_token_len_per_gpu=10 (with actor.use_dynamic_bsz=true) cannot hold one sequence");
  check({"critic.use_dynamic_bsz=true", "critic.ppo_max_token_len_per_gpu=79"},
        "critic.ppo_max_token_len_per_gpu=79 (with critic.use_dynamic_bsz=true) cannot hold one sequence of "
        "data.max_prompt_length + data.max_response_length = 80 tokens; use at least 80");
  check({"rollout.log_prob_use_dynamic_bsz=true", "rollout.log_prob_max_token_len_per_gpu=1"},
        "rollout.log_prob_max_token_len_per_gpu=1 (with rollout.log_prob_use_dynamic_bsz=true)");
  check({"rollout.max_kv_tokens=50"}, "rollout.max_kv_tokens=50 cannot hold the KV cache of one sequence");
  check({"algorithm.adv_estimator=grpo", "rollout.n=1"}, "needs rollout.n >= 2");
  check({"algorithm.adv_estimator=grpo_passk", "rollout.n=1"},
        "algorithm.adv_estimator=grpo_passk needs rollout.n >= 2 (got 1)");
  check({"actor.policy_loss.loss_mode=gpo"},
        "actor.policy_loss.loss_mode: unknown policy loss mode 'gpo'; valid: vanilla, gspo, cispo");
  check({"algorithm.rollout_correction.rollout_is=tokens"}, "valid: off, token, sequence");
  check({"algorithm.rollout_correction.rollout_is_threshold=0"},
        "algorithm.rollout_correction.rollout_is_threshold=0 is out of range: it must lie in (0, inf)");
  check({"algorithm.rollout_correction.rollout_is_threshold_lower=3"},
        "algorithm.rollout_correction.rollout_is_threshold_lower=3 is out of range: it must lie in [0, 2]");
  check({"reward.overlong_buffer.enable=true"},
        "reward.overlong_buffer.len=0 must be in [1, data.max_response_length=");
  check({"reward.overlong_buffer.enable=true", "reward.overlong_buffer.len=4",
         "reward.overlong_buffer.penalty_factor=-1"},
        "reward.overlong_buffer.penalty_factor=-1 is out of range: it must lie in [0, inf)");
  check({"algorithm.filter_groups.metric=reward"},
        "algorithm.filter_groups.metric: unknown value 'reward'; valid: acc, score, seq_reward");
  check({"algorithm.filter_groups.enable=true", "rollout.n=1"},
        "algorithm.filter_groups.enable=true needs rollout.n >= 2 (got 1)");
  check({"algorithm.filter_groups.enable=true", "rollout.n=2", "algorithm.filter_groups.max_num_gen_batches=0"},
        "algorithm.filter_groups.max_num_gen_batches=0 must be >= 1");
  check({"data.curriculum.difficulties=[3, 4]"}, "data.curriculum.steps_per_stage=0 must be at least 1");
  check({"data.curriculum.difficulties=[3, 4]", "data.curriculum.train_files=[a.jsonl, b.jsonl]",
         "data.curriculum.steps_per_stage=5"},
        "data.curriculum: set train_files (one dataset per stage) or difficulties (stages of one dataset), not both");
  check({"data.curriculum.train_files=[a.jsonl, b.jsonl]", "data.train_files=c.jsonl",
         "data.curriculum.steps_per_stage=5"},
        "data.curriculum.train_files replaces data.train_files: leave data.train_files empty");
  check({"data.curriculum.difficulties=[3, 4, 5]", "data.curriculum.steps_per_stage=5",
         "trainer.total_training_steps=10"},
        "trainer.total_training_steps=10 ends before the last of data.curriculum's 3 stages begins (at step 11");
  check({"rollout.top_p=0"}, "rollout.top_p");
}

TEST_CASE("check_config: a curriculum without trainer.total_training_steps runs steps_per_stage x stages",
          "[cpu][config]") {
  ppo::Config c = ppo::load_config({}, {"data.curriculum.difficulties=[2, 3, 4]", "data.curriculum.steps_per_stage=7"});
  const ppo::RunShape shape = ppo::check_config(c, 1);
  CHECK(c.trainer.total_training_steps == 0);  // the config as given: check_config never writes it
  CHECK(shape.total_training_steps == 21);
  CHECK(c.data.curriculum.difficulties == std::vector<int64_t>{2, 3, 4});
  CHECK_THAT(usage_message([] { ppo::load_config({}, {"data.curriculum.difficulties=[3, x]"}); }),
             Catch::Contains("data.curriculum.difficulties: 'x' is not an integer"));
  CHECK_THAT(usage_message([] { ppo::load_config({}, {"data.curriculum.difficulties=3"}); }),
             Catch::Contains("a list of whole numbers, e.g. [3, 4, 5]"));
}

TEST_CASE("the schema: each key's range is checked once after layering, and shown with the key", "[cpu][config]") {
  const auto refused = [](const std::vector<std::string>& overrides) {
    return usage_message([&] { ppo::load_config({}, overrides); });
  };
  CHECK(refused({"model.rope_theta=-1"}) == "model.rope_theta=-1 is out of range: it must lie in [1, 1e12]");
  CHECK(refused({"model.rms_norm_eps=2"}) == "model.rms_norm_eps=2 is out of range: it must lie in (0, 1]");
  CHECK(refused({"parallel.zero_stage=4"}) == "parallel.zero_stage=4 is out of range: 0 to 3");
  CHECK(refused({"rollout.top_k=0"}) == "rollout.top_k=0 must be -1 (off) or >= 1");
  CHECK(refused({"actor.lora.rank=-1"}) == "actor.lora.rank=-1 is out of range: 0 (off) to 65536");
  CHECK(refused({"trainer.save_freq=-1"}) == "trainer.save_freq=-1 must be >= 0");
  CHECK(refused({"data.truncation=both"}) ==
        "data.truncation: unknown value 'both'; valid: error, left, right, middle");
  CHECK(refused({"critic.optim.betas=[0.9, -0.5]"}) ==
        "critic.optim.betas=-0.5 is out of range: it must lie in [0, 1)");
  // The layered value counts: a file's bad value fixed by an override is no error, and the reverse is.
  ppo_test::TempDir tmp;
  const std::string bad = write_temp(tmp, "bad.yaml", "rollout:\n  top_p: 0\n");
  CHECK(ppo::load_config({bad}, {"rollout.top_p=0.9"}).rollout.top_p == 0.9);
  CHECK_THAT(usage_message([&] { ppo::load_config({bad}, {}); }), Catch::Contains("rollout.top_p=0 is out of range"));
  const ppo::Config edges = ppo::load_config({}, {"rollout.top_k=-1", "actor.lora.rank=0", "algorithm.gamma=1"});
  CHECK(edges.rollout.top_k == -1);  // the "off" value and the closed ends are in range
  // --help and the YAML comments show each range; the rows say which keys a resume may change.
  ppo::Config c;
  const std::string help = ppo::config_help();
  CHECK_THAT(help, Catch::Contains("  model.rope_theta (float: [1, 1e12], default 10000.0)"));
  CHECK_THAT(help, Catch::Contains("  data.truncation (string: error | left | right | middle, default \"error\")"));
  CHECK_THAT(ppo::config_to_yaml(c, /*comments=*/true),
             Catch::Contains("  n: 4  # responses sampled per prompt (int: 1 to 65536)"));
  for (const ppo::ConfigField& f : ppo::config_fields(c)) {
    INFO(f.key);
    if (f.key == "trainer.save_freq" || f.key == "actor.offload.param" || f.key == "rollout.micro_batch_size")
      CHECK(f.on_resume == ppo::OnResume::free);
    if (f.key == "data.seed" || f.key == "rollout.n" || f.key == "actor.optim.lr")
      CHECK(f.on_resume == ppo::OnResume::fixed);
  }
}
