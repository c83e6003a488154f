// Hostile input, by class: JSON nested past any reader's stack, YAML aliases, sizes near 2^62, FIFOs where files
// belong, checkpoints that lost their manifest or came from another run, `ppo export` aimed at what it reads, and
// broken models. Each case exits 2 (bad input) with one `error:` line naming the file, key or command, within
// seconds, and nothing already written is touched.
#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/manifest.h"
#include "common/utf8.h"
#include "model/hf.h"
#include "model/transformer.h"
#include "tests/app/run_ppo.h"
#include "tests/model/hf_folder.h"
#include "tests/model/tiny_tokenizer.h"
#include "tests/paths.h"
#include "tests/temp_dir.h"
#include "tests/text_file.h"
#include "text/tokenizer.h"

namespace fs = std::filesystem;
using nlohmann::json;
using ppo_test::check_one_error;
using ppo_test::read_text;
using ppo_test::Result;
using ppo_test::run_ppo;
using ppo_test::TempDir;
using ppo_test::write_hf_model;
using ppo_test::write_text;

namespace {

const std::string kTinyConfig = "--config " + ppo_test::paths().source_dir + "/configs/regression_tiny.yaml ";
constexpr int kLimit = 60;  // seconds: every case here ends within a few; a hang is killed and fails

// `depth` levels of [ ] (or {"a": }) around 1.
std::string nested(size_t depth, bool arrays = true) {
  std::string text;
  for (size_t i = 0; i < depth; ++i) text += arrays ? "[" : "{\"a\": ";
  text += "1";
  for (size_t i = 0; i < depth; ++i) text += arrays ? "]" : "}";
  return text;
}

// A Qwen2 config.json of a tiny model over the built-in character tokenizer (99 tokens).
json qwen2_config() {
  return {{"architectures", {"Qwen2ForCausalLM"}},
          {"hidden_size", 32},
          {"intermediate_size", 64},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"vocab_size", 99},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 10000.0},
          {"max_position_embeddings", 256},
          {"tie_word_embeddings", true}};
}

// The JSON `text` with the value of its key `key` replaced by `value` (raw text).
std::string with_raw_value(json doc, const std::string& key, const std::string& value) {
  doc[key] = "@@";
  std::string text = doc.dump();
  return text.replace(text.find("\"@@\""), 4, value);
}

}  // namespace

TEST_CASE("hostile input: JSON nested 200,000 deep in config.json and tokenizer.json is an error naming the file",
          "[cpu][reliability]") {
  TempDir tmp;
  const std::string model = tmp.sub("model");
  fs::create_directories(model);
  for (const char* key : {"architectures", "hidden_size", "rope_scaling", "eos_token_id"}) {
    INFO(key);
    write_text(model + "/config.json",
               with_raw_value(qwen2_config(), key, nested(200000, std::string(key) != "rope_scaling")));
    check_one_error(run_ppo("config model.path=" + model, kLimit), model + "/config.json: JSON nested deeper");
  }
  check_one_error(run_ppo("generate " + kTinyConfig + "model.path=" + model, kLimit), "JSON nested deeper");
  const std::string tokenizer = tmp.sub("tokenizer");
  fs::create_directories(tokenizer);
  for (const char* key : {"normalizer", "pre_tokenizer", "decoder"}) {
    INFO(key);
    write_text(tokenizer + "/tokenizer.json", with_raw_value(ppo_test::tiny_tokenizer_json(), key, nested(200000)));
    check_one_error(run_ppo("tokenize --tokenizer " + tokenizer + " < /dev/null", kLimit),
                    tokenizer + "/tokenizer.json: JSON nested deeper");
  }
}

TEST_CASE("hostile input: YAML aliases are refused naming the file and line, self-referential or exponential",
          "[cpu][reliability]") {
  TempDir tmp;
  const std::vector<std::pair<std::string, std::string>> files = {
      {"data: &d\n  task: *d\n", ":2:9:"},                        // a mapping holding itself
      {"trainer:\n  logger: &l [console, *l]\n", ":2:24:"},       // in trainer.logger
      {"actor:\n  optim:\n    betas: &b [0.9, *b]\n", ":3:21:"},  // in actor.optim.betas
  };
  for (const auto& [yaml, where] : files) {
    write_text(tmp.sub("alias.yaml"), yaml);
    check_one_error(run_ppo("config --config " + tmp.sub("alias.yaml"), kLimit),
                    tmp.sub("alias.yaml") + where + " YAML aliases (*name) are not supported");
  }
  // A "billion laughs": 10 levels of 10 aliases each, 10^10 nodes once expanded.
  std::string laughs = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int level = 1; level < 10; ++level) {
    laughs += "a" + std::to_string(level) + ": &a" + std::to_string(level) + " [";
    for (int k = 0; k < 10; ++k) laughs += (k ? ", *a" : "*a") + std::to_string(level - 1);
    laughs += "]\n";
  }
  write_text(tmp.sub("laughs.yaml"), laughs);
  check_one_error(run_ppo("config --config " + tmp.sub("laughs.yaml"), kLimit), tmp.sub("laughs.yaml") + ":2:");
  check_one_error(run_ppo("config 'actor.optim.betas=&b [0.9, *b]'", kLimit), "YAML aliases (*name) are not supported");
}

TEST_CASE("hostile input: a control character or a key given twice in a config file is named with its line",
          "[cpu][reliability]") {
  TempDir tmp;
  // yaml-cpp reads "<NUL>x72" as an escape ("reverse"); a newline inside a quoted output folder; an escape code. A
  // key given twice in one file, nested and dotted, or twice in one mapping: named with both lines.
  const std::vector<std::pair<std::string, std::string>> files = {
      {std::string("data:\n  task: \"\0x72everse\"\n", 27), ":2: a control character (byte 0x00)"},
      {"trainer:\n  output_dir: \"runs/a\x0b\"\n", ":2: a control character (byte 0x0b)"},
      {"data:\n  task: reverse\n  seed: 3\x1b[2J\n", ":3: a control character (byte 0x1b)"},
      {"data:\n  task: rev\x7f\n", ":2: a control character (byte 0x7f)"},
      {"actor:\n  optim:\n    lr: 0.1\nactor.optim.lr: 0.2\n",
       ":4: actor.optim.lr is given twice in this file (line 3"},
      {"actor.optim:\n  lr: 0.1\nactor:\n  optim:\n    lr: 0.2\n", ":5: actor.optim.lr is given twice"},
      {"data:\n  seed: 1\n  seed: 2\n", ":3: key 'seed' is given twice in the same mapping"},
  };
  for (const auto& [yaml, where] : files) {
    INFO(where);
    write_text(tmp.sub("bad.yaml"), yaml);
    check_one_error(run_ppo("config --config " + tmp.sub("bad.yaml"), kLimit), tmp.sub("bad.yaml") + where);
  }
  write_text(tmp.sub("tabs.yaml"), "data:\r\n  task: reverse\t# a tab and CRLF are text\r\n");
  CHECK(run_ppo("config --config " + tmp.sub("tabs.yaml"), kLimit).status == 0);
}

TEST_CASE("hostile input: sizes near 2^62 are range errors naming the key, without a crash or a hang",
          "[cpu][reliability]") {
  check_one_error(run_ppo("config data.train_batch_size=4611686018427387904 rollout.n=4", kLimit),
                  "data.train_batch_size=4611686018427387904 is out of range");
  check_one_error(run_ppo("config rollout.n=4611686018427387904", kLimit), "rollout.n=4611686018427387904 is out");
  check_one_error(run_ppo("train " + kTinyConfig + "rollout.n=4611686018427387904", kLimit), "rollout.n=");
  // A prime batch (2^61 - 1) with a mini-batch of 3: once a search for valid values that ran for minutes.
  check_one_error(run_ppo("config data.train_batch_size=2305843009213693951 actor.ppo_mini_batch_size=3", kLimit),
                  "data.train_batch_size=2305843009213693951 is out of range");
  check_one_error(run_ppo("config data.train_batch_size=16777213 actor.ppo_mini_batch_size=3", kLimit),
                  "nearest valid: 1 or 16777213");
  check_one_error(run_ppo("config data.train_batch_size=1048576 rollout.n=65536", kLimit),
                  "responses per step is out of range");
  // Curriculum: stages x steps_per_stage once wrapped to a negative step count.
  const std::string stages = "data.curriculum.difficulties=[2,3,4] data.curriculum.steps_per_stage=";
  check_one_error(run_ppo("train " + kTinyConfig + stages + "4611686018427387904", kLimit),
                  "data.curriculum.steps_per_stage=4611686018427387904 is out of range");
  check_one_error(run_ppo("config " + stages + "1000000000", kLimit), "x 3 stages = 3000000000 steps is out of range");
  // A model folder's sizes, and a model too large for this machine.
  TempDir tmp;
  fs::create_directories(tmp.sub("model"));
  json config = qwen2_config();
  config["hidden_size"] = 4611686018427387904LL;
  write_text(tmp.sub("model/config.json"), config.dump());
  check_one_error(run_ppo("config model.path=" + tmp.sub("model"), kLimit),
                  "model.hidden_size=4611686018427387904 is out of range");
  config["hidden_size"] = 18446744073709551615ULL;
  write_text(tmp.sub("model/config.json"), config.dump());
  check_one_error(run_ppo("config model.path=" + tmp.sub("model"), kLimit), "\"hidden_size\" is 18446744073709551615");
  check_one_error(run_ppo("generate " + kTinyConfig +
                              "model.hidden_size=16384 model.num_layers=512 model.num_heads=16 "
                              "model.num_kv_heads=16 model.intermediate_size=65536",
                          kLimit),
                  "GiB of memory available: model.hidden_size=16384, model.num_layers=512");
  // Whole numbers of data records that do not fit 64 signed bits.
  for (const char* field : {"index", "difficulty"}) {
    write_text(tmp.sub("val.jsonl"), json{{"prompt", "12>"},
                                          {"reward_model", {{"ground_truth", "21"}}},
                                          {"extra_info", {{field, 18446744073709551615ULL}}}}
                                             .dump() +
                                         "\n");
    check_one_error(
        run_ppo("generate " + kTinyConfig + "data.val_files=" + tmp.sub("val.jsonl"), kLimit),
        tmp.sub("val.jsonl") + ":1: extra_info: field '" + field + "': 18446744073709551615 is out of range");
  }
}

TEST_CASE("hostile input: a FIFO where a file belongs is refused at once", "[cpu][reliability]") {
  TempDir tmp;
  const auto fifo = [&](const std::string& name) {
    REQUIRE(::mkfifo(tmp.sub(name).c_str(), 0600) == 0);
    return tmp.sub(name);
  };
  check_one_error(run_ppo("config --config " + fifo("config.yaml"), kLimit), "is a FIFO (named pipe)");
  fs::create_directories(tmp.sub("model"));
  REQUIRE(::mkfifo(tmp.sub("model/config.json").c_str(), 0600) == 0);
  check_one_error(run_ppo("config model.path=" + tmp.sub("model"), kLimit), "config.json: is a FIFO");
  write_hf_model(tmp.sub("weights"));
  fs::remove(tmp.sub("weights/model.safetensors"));
  REQUIRE(::mkfifo(tmp.sub("weights/model.safetensors").c_str(), 0600) == 0);
  check_one_error(run_ppo("generate " + kTinyConfig + "model.path=" + tmp.sub("weights"), kLimit),
                  "model.safetensors: is a FIFO");
  check_one_error(run_ppo("train " + kTinyConfig + "data.train_files=" + fifo("train.jsonl"), kLimit),
                  "train.jsonl: is a FIFO");
  check_one_error(run_ppo("generate " + kTinyConfig + "data.chat_template=" + fifo("template.jinja"), kLimit),
                  "template.jinja: is a FIFO");
}

TEST_CASE("hostile input: a checkpoint without its manifest, or from another step or run, does not load",
          "[cpu][reliability]") {
  TempDir tmp;
  const auto train = [&](const std::string& dir, const std::string& extra) {
    return run_ppo("train " + kTinyConfig + "trainer.num_threads=1 trainer.logger=[jsonl] trainer.test_freq=0 " +
                       "trainer.val_before_train=false trainer.output_dir=" + dir + " " + extra,
                   kLimit * 5);
  };
  const std::string run = tmp.sub("run"), other = tmp.sub("other");
  REQUIRE(train(run, "trainer.total_training_steps=2 trainer.save_freq=2").status == 0);
  REQUIRE(train(other, "trainer.total_training_steps=2 trainer.save_freq=2 data.seed=7 rollout.n=2").status == 0);
  const std::string metrics = read_text(run + "/metrics.jsonl");
  const auto fresh_copy = [&](const std::string& name) {
    const std::string copy = tmp.sub(name);
    fs::copy(run, copy, fs::copy_options::recursive);
    return copy;
  };
  const std::string resume = "trainer.total_training_steps=3";
  {  // the manifest deleted: refused; a flipped byte is then never loaded unnoticed
    const std::string copy = fresh_copy("no_manifest"), checkpoint = copy + "/checkpoints/global_step_2";
    fs::remove(checkpoint + "/manifest.json");
    std::string actor = read_text(checkpoint + "/actor.pt");
    actor[actor.size() / 2] ^= 0x40;
    write_text(checkpoint + "/actor.pt", actor);
    check_one_error(train(copy, resume), checkpoint + " has no manifest.json");
    CHECK(read_text(copy + "/metrics.jsonl") == metrics);
    // Written before manifests existed: loads only when asked (the flipped byte is then the user's risk).
    write_text(checkpoint + "/actor.pt", read_text(run + "/checkpoints/global_step_2/actor.pt"));
    Result accepted = train(copy, resume + " trainer.accept_checkpoints_without_manifest=true");
    INFO(accepted.output);
    CHECK(accepted.status == 0);
    CHECK_THAT(accepted.output, Catch::Contains("at step 2"));
  }
  {  // trainer_state.json of another run (another data.seed and rollout.n), with a manifest made to match
    const std::string copy = fresh_copy("foreign_state"), checkpoint = copy + "/checkpoints/global_step_2";
    fs::copy_file(other + "/checkpoints/global_step_2/trainer_state.json", checkpoint + "/trainer_state.json",
                  fs::copy_options::overwrite_existing);
    ppo::write_manifest(checkpoint);
    const Result r = train(copy, resume);
    check_one_error(r, "with a config that changes the run's numbers");
    CHECK_THAT(r.output, Catch::Contains("data.seed is 1 here, 7 in the checkpoint") &&
                             Catch::Contains("rollout.n is 4 here, 2 in the checkpoint"));
    CHECK(read_text(copy + "/metrics.jsonl") == metrics);
  }
  {  // global_step 99 inside global_step_2
    const std::string copy = fresh_copy("step"), checkpoint = copy + "/checkpoints/global_step_2";
    json state = json::parse(read_text(checkpoint + "/trainer_state.json"));
    state["global_step"] = 99;
    write_text(checkpoint + "/trainer_state.json", state.dump());
    ppo::write_manifest(checkpoint);
    check_one_error(train(copy, resume), "says global_step 99, but its folder is global_step_2");
  }
  {  // a whole checkpoint folder of another run: refused, or resumed with the changed keys named when allowed
    const std::string copy = fresh_copy("foreign_folder"), checkpoint = copy + "/checkpoints/global_step_2";
    ppo::remove_tree(checkpoint);
    fs::copy(other + "/checkpoints/global_step_2", checkpoint, fs::copy_options::recursive);
    check_one_error(train(copy, resume), "rollout.n is 4 here, 2 in the checkpoint");
    CHECK(read_text(copy + "/metrics.jsonl") == metrics);
    Result allowed = train(copy, resume + " trainer.resume_allow_config_change=true");
    INFO(allowed.output);
    CHECK(allowed.status == 0);
    CHECK_THAT(allowed.output, Catch::Contains("note: resuming with changed keys") &&
                                   Catch::Contains("rollout.n is 4 here, 2 in the checkpoint"));
  }
}

TEST_CASE("hostile input: ppo export never removes what it does not own", "[cpu][reliability]") {
  TempDir tmp;
  const std::string run = tmp.sub("run"), checkpoint = run + "/checkpoints/global_step_1";
  REQUIRE(run_ppo("train " + kTinyConfig + "trainer.num_threads=1 trainer.logger=[jsonl] trainer.test_freq=0 " +
                      "trainer.total_training_steps=1 trainer.output_dir=" + run,
                  kLimit * 2)
              .status == 0);
  const std::string actor = read_text(checkpoint + "/actor.pt");
  const auto run_intact = [&] {
    CHECK(read_text(checkpoint + "/actor.pt") == actor);
    CHECK(fs::exists(run + "/checkpoints/latest_checkpointed_iteration.txt"));
    CHECK(fs::exists(run + "/config.yaml"));
    CHECK(fs::exists(run + "/metrics.jsonl"));
  };
  const std::string exported = tmp.sub("hf");
  // A folder of the user's named like a temporary of --out: kept, with its file.
  fs::create_directories(exported + ".tmp");
  write_text(exported + ".tmp/mine.txt", "mine");
  Result plain = run_ppo("export --checkpoint " + checkpoint + " --out " + exported, kLimit);
  INFO(plain.output);
  REQUIRE(plain.status == 0);
  CHECK(read_text(exported + ".tmp/mine.txt") == "mine");
  // An empty --out, in a folder that holds ./.tmp: a usage error, ./.tmp kept.
  fs::create_directories(tmp.sub("cwd/.tmp"));
  write_text(tmp.sub("cwd/.tmp/mine.txt"), "mine");
  check_one_error(run_ppo("export --checkpoint " + checkpoint + " --out ''", kLimit, tmp.sub("cwd")), "--out is empty");
  CHECK(read_text(tmp.sub("cwd/.tmp/mine.txt")) == "mine");
  // --out aimed at what is read or what the run owns, even with --force.
  check_one_error(run_ppo("export --checkpoint " + checkpoint + " --out " + checkpoint + "/.. --force", kLimit),
                  "is the checkpoint being exported or a folder holding it");
  check_one_error(run_ppo("export --checkpoint " + checkpoint + " --out " + checkpoint + " --force", kLimit),
                  "is the checkpoint being exported");
  check_one_error(run_ppo("export --checkpoint " + checkpoint + " --out " + run + " --force", kLimit),
                  "a folder holding it");
  check_one_error(run_ppo("export --checkpoint " + checkpoint + " --out " + run + "/checkpoints/hf --force", kLimit),
                  "lies inside the run's checkpoints");
  run_intact();
  // --force replaces an earlier export, and nothing else.
  write_text(exported + "/notes.txt", "mine");
  check_one_error(run_ppo("export --checkpoint " + checkpoint + " --out " + exported + " --force", kLimit),
                  "holds 'notes.txt', which is not a file ppo export writes");
  CHECK(read_text(exported + "/notes.txt") == "mine");
  fs::remove(exported + "/notes.txt");
  Result forced = run_ppo("export --checkpoint " + checkpoint + " --out " + exported + " --force", kLimit);
  INFO(forced.output);
  CHECK(forced.status == 0);
  CHECK(fs::exists(exported + "/model.safetensors"));
  for (const auto& entry : fs::directory_iterator(tmp.path))  // no temporary left beside it
    CHECK(entry.path().filename().string().rfind("hf.tmp-", 0) != 0);
  run_intact();
}

TEST_CASE("hostile input: a model with NaN weights or an overflowing config is not evaluated as if fine",
          "[cpu][reliability]") {
  TempDir tmp;
  write_hf_model(tmp.sub("nan"), [](ppo::CausalLM& model) {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.fill_(std::numeric_limits<float>::quiet_NaN());
  });
  for (const char* command : {"eval", "generate"})
    check_one_error(run_ppo(std::string(command) + " " + kTinyConfig + "model.path=" + tmp.sub("nan"), kLimit),
                    "the model of " + tmp.sub("nan") + " (model.path) gives non-finite logits");
  write_hf_model(tmp.sub("rope"));
  json config = json::parse(read_text(tmp.sub("rope/config.json")));
  config["rope_theta"] = 1e-300;
  write_text(tmp.sub("rope/config.json"), config.dump());
  check_one_error(run_ppo("eval " + kTinyConfig + "model.path=" + tmp.sub("rope"), kLimit),
                  tmp.sub("rope") + "/config.json: model.rope_theta=");
  config["rope_theta"] = 10000.0;
  config["rms_norm_eps"] = 1e300;
  write_text(tmp.sub("rope/config.json"), config.dump());
  check_one_error(run_ppo("eval " + kTinyConfig + "model.path=" + tmp.sub("rope"), kLimit), "model.rms_norm_eps=");
}

TEST_CASE("hostile input: errors name the file, key or command, never a bare library message", "[cpu][reliability]") {
  TempDir tmp;
  check_one_error(run_ppo("generate " + kTinyConfig + "model.vocab_size=5", kLimit),
                  "model.vocab_size=5 is below the 99 tokens of model.tokenizer=char");
  // A post-processor whose SpecialToken id is a number (tokenizers writes the token's text).
  json tokenizer = ppo_test::tiny_tokenizer_json();
  tokenizer["post_processor"] = {{"type", "TemplateProcessing"},
                                 {"single", {{{"SpecialToken", {{"id", 300}, {"type_id", 0}}}}}}};
  write_text(tmp.sub("tokenizer.json"), tokenizer.dump());
  check_one_error(run_ppo("tokenize --tokenizer " + tmp.sub("tokenizer.json") + " < /dev/null", kLimit),
                  tmp.sub("tokenizer.json") + ": post_processor TemplateProcessing: single[0].SpecialToken.id must be");
  // A chat role the templates do not render, and a K&K ground truth without names and solution: named by line.
  write_text(
      tmp.sub("chat.jsonl"),
      json{{"prompt", {{{"role", "user"}, {"content", "12>"}}}}, {"reward_model", {{"ground_truth", "21"}}}}.dump() +
          "\n" +
          json{{"prompt", {{{"role", "function"}, {"content", "{}"}}}}, {"reward_model", {{"ground_truth", "x"}}}}
              .dump() +
          "\n");
  check_one_error(
      run_ppo("generate " + kTinyConfig + "data.chat_template=plain data.val_files=" + tmp.sub("chat.jsonl"), kLimit),
      tmp.sub("chat.jsonl") + ":2: field 'prompt': message 0 has role \"function\"");
  write_text(
      tmp.sub("kk.jsonl"),
      json{{"prompt", "1>"}, {"data_source", "kk_logic"}, {"reward_model", {{"ground_truth", {{"names", {"Ann"}}}}}}}
              .dump() +
          "\n");
  check_one_error(run_ppo("generate " + kTinyConfig + "data.val_files=" + tmp.sub("kk.jsonl"), kLimit),
                  tmp.sub("kk.jsonl") + ":1: kk ground truth");
  // A reward program's score beyond the score range (here beyond float32): named with the command and the value.
  write_text(tmp.sub("score.sh"), "read request; echo '{\"score\": 1e39}'; cat > /dev/null\n");
  const std::string program = "sh " + tmp.sub("score.sh");
  const Result big = run_ppo(
      "train " + kTinyConfig + "trainer.output_dir=" + tmp.sub("run") + " 'reward.command=" + program + "'", kLimit);
  check_one_error(big, "reward.command '" + program + "'");
  CHECK_THAT(big.output, Catch::Contains("\"score\" 1e+39 is outside [-1e6, 1e6]"));
}

TEST_CASE("hostile input: a chat template with a 60,000-character system message or 5,000 open blocks runs",
          "[cpu][reliability]") {
  TempDir tmp;
  const std::string loop =
      "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
      "'<|im_end|>\\n' }}{% endfor %}{{ '<|im_start|>assistant\\n' }}";
  std::string open_blocks;
  for (int i = 0; i < 5000; ++i) open_blocks += "<|im_start|>system\nab";
  const std::string templates[] = {"{{ '<|im_start|>system\\n" + std::string(60000, 's') + "<|im_end|>\\n' }}" + loop,
                                   open_blocks + "<|im_end|>" + loop};
  // The long message in tokenizer_config.json's "chat_template", the open blocks in chat_template.jinja.
  for (const bool in_config : {true, false}) {
    const std::string& jinja = templates[in_config ? 0 : 1];
    const std::string dir = tmp.sub(in_config ? "in_config" : "in_jinja");
    fs::create_directories(dir);
    json tokenizer = ppo_test::tiny_tokenizer_json();
    tokenizer["added_tokens"].push_back({{"id", 302}, {"content", "<|im_end|>"}, {"special", true}});
    write_text(dir + "/tokenizer.json", tokenizer.dump());
    json config = {{"eos_token", "<|im_end|>"}};
    if (in_config) config["chat_template"] = jinja;
    write_text(dir + "/tokenizer_config.json", config.dump());
    if (!in_config) write_text(dir + "/chat_template.jinja", jinja);
    const std::string chat = "model.tokenizer=" + dir + " data.apply_chat_template=true data.truncation=left ";
    Result generated = run_ppo("generate " + ppo_test::kTinyOneThread + chat + "--count 1", kLimit);
    INFO(generated.output);
    CHECK(generated.status == 0);
    Result trained = run_ppo(
        "train " + ppo_test::kTinyOneThread + chat + "trainer.total_training_steps=1 trainer.test_freq=0 " +
            "trainer.val_before_train=false trainer.output_dir=" + tmp.sub("run") + " trainer.resume_mode=disable",
        kLimit * 2);
    INFO(trained.output);
    CHECK(trained.status == 0);
  }
}

TEST_CASE("hostile input: responses cut inside a UTF-8 character print as whole UTF-8, U+FFFD for the cut",
          "[cpu][reliability]") {
  // A byte-level tokenizer whose model (random weights) samples any byte: most responses are not whole UTF-8.
  TempDir tmp;
  const std::string dir = tmp.sub("bytes");
  fs::create_directories(dir);
  json tokenizer = ppo_test::tiny_tokenizer_json();
  tokenizer["added_tokens"].push_back({{"id", 302}, {"content", "<|im_end|>"}, {"special", true}});
  write_text(dir + "/tokenizer.json", tokenizer.dump());
  write_text(dir + "/tokenizer_config.json", json{{"eos_token", "<|im_end|>"}}.dump());
  const std::string cmd = "generate " + ppo_test::kTinyOneThread + "model.tokenizer=" + dir + " --count 4";
  const Result jsonl = run_ppo(cmd + " --jsonl", kLimit);
  INFO(jsonl.output);
  REQUIRE(jsonl.status == 0);
  int lines = 0, replaced = 0;
  for (size_t at = 0; at < jsonl.output.size();) {
    const size_t end = std::min(jsonl.output.find('\n', at), jsonl.output.size());
    const std::string line = jsonl.output.substr(at, end - at);
    at = end + 1;
    if (line.rfind("{", 0) != 0) continue;
    const json record = json::parse(line);  // throws on a line that is not JSON
    ++lines;
    replaced += record.at("response").get<std::string>().find("\xEF\xBF\xBD") != std::string::npos ? 1 : 0;
  }
  CHECK(lines >= 4);
  CHECK(replaced > 0);
  // The plain form: whole UTF-8, no raw control bytes (a NUL or an escape sequence from the model) in the terminal.
  const Result plain = run_ppo(cmd, kLimit);
  REQUIRE(plain.status == 0);
  CHECK(ppo::utf8_is_valid(plain.output));
  CHECK(std::none_of(plain.output.begin(), plain.output.end(),
                     [](char c) { return c == '\0' || c == '\x1B' || c == '\r'; }));
}

TEST_CASE("hostile input: a bad model shape leaves no run folder; a tokenizer without its EOS; unused roles keys",
          "[cpu][reliability]") {
  TempDir tmp;
  check_one_error(run_ppo("train " + kTinyConfig + "model.num_heads=3 trainer.output_dir=" + tmp.sub("shape"), kLimit),
                  "must be divisible by model.num_heads (3)");
  CHECK_FALSE(fs::exists(tmp.sub("shape")));
  // tokenizer.json alone: no tokenizer_config.json to name the EOS (and pad) token.
  fs::create_directories(tmp.sub("tok"));
  write_text(tmp.sub("tok") + "/tokenizer.json", ppo_test::tiny_tokenizer_json().dump());
  check_one_error(run_ppo("generate " + kTinyConfig + "model.tokenizer=" + tmp.sub("tok"), kLimit),
                  "model.tokenizer: '" + tmp.sub("tok") + "' names no eos_token");
  // generate, eval and sft run every rank alike: the roles keys are noted as unused.
  const Result noted = run_ppo("generate " + ppo_test::kTinyOneThread + "--count 1 parallel.rollout_ranks=1", kLimit);
  INFO(noted.output);
  CHECK(noted.status == 0);
  CHECK_THAT(noted.output,
             Catch::Contains("note: parallel.rollout_ranks=1 and async.max_staleness=0 are for `ppo train`"));
}
