// Hugging Face interop through the `ppo` command: sft -> export -> model.path round trip (bit-identical weights and
// logits, identical generations), model.path with a tokenizer.json folder (no BOS), `ppo tokenize`, and the errors.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/config.h"
#include "model/hf.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "tests/app/run_ppo.h"
#include "tests/model/small_model.h"
#include "tests/model/tiny_tokenizer.h"
#include "tests/paths.h"
#include "tests/temp_dir.h"
#include "text/bpe_tokenizer.h"
#include "workers/actor.h"

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using nlohmann::json;
using ppo_test::count_lines;
using ppo_test::Result;
using ppo_test::run_ppo;

const std::string kTiny = "--config " + ppo_test::paths().source_dir + "/configs/regression_tiny.yaml ";

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

using ppo_test::require_equal_states;
using ppo_test::state_of;

// Lines of `output` that are generations (prompt / response / reward).
std::string generations(const std::string& output) {
  std::istringstream in(output);
  std::string kept;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("prompt:", 0) == 0 || line.rfind("response:", 0) == 0 || line.rfind("reward:", 0) == 0)
      kept += line + "\n";
  return kept;
}

}  // namespace

TEST_CASE("ppo export writes a checkpoint that model.path loads bit-identically", "[cpu][cli][hf]") {
  ppo_test::TempDir tmp;
  const fs::path root = tmp.path;
  const std::string run = (root / "run").string(), hf = (root / "hf").string();
  Result sft = run_ppo("sft " + kTiny + "actor.ppo_micro_batch_size_per_gpu=8 trainer.output_dir=" + run +
                       " trainer.total_training_steps=10 trainer.test_freq=0 actor.optim.lr=0.003 "
                       "trainer.resume_mode=disable");
  INFO(sft.output);
  REQUIRE(sft.status == 0);
  const std::string checkpoint = run + "/checkpoints/global_step_10";
  Result exported = run_ppo("export --checkpoint " + checkpoint + "/ --out " + hf);  // the run's config.yaml is found
  INFO(exported.output);
  REQUIRE(exported.status == 0);
  CHECK_THAT(exported.output, Contains("exported " + checkpoint));
  for (const char* file : {"config.json", "model.safetensors", "generation_config.json", "char_tokenizer.txt"}) {
    INFO(file);
    CHECK(fs::is_regular_file(fs::path(hf) / file));
  }

  // In C++: the checkpoint's policy and the exported folder hold the same tensors, and give the same logits.
  const ppo::Config run_config = ppo::load_config({run + "/config.yaml"}, {});
  ppo::CausalLM from_checkpoint(run_config.model, 99);
  ppo::load_module(*from_checkpoint, checkpoint + "/actor.pt");
  ppo::ModelConfig hf_shape = ppo::model_config_from_hf(hf, ppo::ModelConfig{});
  hf_shape.seed = run_config.model.seed + 1;  // another init, so that loading has to overwrite every tensor
  ppo::CausalLM from_hf(hf_shape, hf_shape.vocab_size);
  ppo::load_hf_weights(*from_hf, hf, /*allow_missing_value_head=*/false);
  const size_t compared = require_equal_states(state_of(*from_checkpoint), state_of(*from_hf));
  CHECK(compared >= 10);
  {
    torch::NoGradGuard no_grad;
    auto ids = torch::randint(0, 99, {2, 12}, torch::kLong);           // [B, T]
    auto positions = torch::arange(12, torch::kLong).expand({2, 12});  // [B, T]
    CHECK(torch::equal(from_checkpoint->forward(ids, positions), from_hf->forward(ids, positions)));
  }

  // Through the command: model.path generates exactly what the checkpoint generates, and not what the seeded init
  // does (so the folder's weights were really used).
  const std::string count = "--count 4 ";
  Result with_path = run_ppo("generate " + kTiny + count + "model.path=" + hf);
  Result with_checkpoint = run_ppo("generate " + kTiny + count + "actor.init_checkpoint=" + checkpoint);
  Result seeded = run_ppo("generate " + kTiny + count);
  INFO(with_path.output);
  REQUIRE(with_path.status == 0);
  REQUIRE(with_checkpoint.status == 0);
  REQUIRE(seeded.status == 0);
  CHECK(count_lines(with_path.output, "response: ") == 4 * 4);
  CHECK(generations(with_path.output) == generations(with_checkpoint.output));
  CHECK(generations(with_path.output) != generations(seeded.output));

  // PPO with a critic (regression_tiny uses GAE) starts from the folder: policy and critic backbone.
  Result train = run_ppo("train " + kTiny + "model.path=" + hf + " trainer.output_dir=" + (root / "rl").string() +
                         " trainer.total_training_steps=1 trainer.test_freq=0 trainer.val_before_train=false "
                         "trainer.resume_mode=disable");
  INFO(train.output);
  CHECK(train.status == 0);
  CHECK_THAT(train.output, Contains("step 1/1"));

  // Sharded export of the same checkpoint: several files, the same tensors.
  Result sharded = run_ppo("export --checkpoint " + checkpoint + " --out " + (root / "sharded").string() +
                           " --max-shard-bytes 60000");
  INFO(sharded.output);
  REQUIRE(sharded.status == 0);
  CHECK(fs::exists(root / "sharded" / "model.safetensors.index.json"));
  require_equal_states(ppo::load_safetensors_dir(hf), ppo::load_safetensors_dir((root / "sharded").string()));
}

TEST_CASE("ppo export and model.path errors exit 2 naming the file", "[cpu][cli][hf]") {
  ppo_test::TempDir tmp;
  const fs::path root = tmp.path;
  const fs::path orphan = root / "copied" / "checkpoints" / "global_step_3";  // a checkpoint without its run's config
  fs::create_directories(orphan);
  write_text(orphan / "actor.pt", "not read: the missing config.yaml stops the export first");
  fs::create_directories(root / "no_weights");
  write_text(root / "no_weights" / "config.json", json{{"architectures", {"LlamaForCausalLM"}},
                                                       {"hidden_size", 64},
                                                       {"intermediate_size", 128},
                                                       {"num_hidden_layers", 2},
                                                       {"num_attention_heads", 4},
                                                       {"num_key_value_heads", 2},
                                                       {"max_position_embeddings", 32},
                                                       {"vocab_size", 99}}
                                                      .dump());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"export --out " + (root / "x").string(), "--checkpoint"},
      {"export --checkpoint " + (root / "none").string() + " --out " + (root / "x").string(),
       (root / "none" / "actor.pt").string()},
      {"export --checkpoint " + orphan.string() + " --out " + (root / "x").string(),
       (root / "copied" / "config.yaml").string()},
      {"generate " + kTiny + "model.path=" + (root / "absent").string(), (root / "absent" / "config.json").string()},
      {"generate " + kTiny + "model.path=" + (root / "no_weights").string(), "model.safetensors"},
      {"train " + kTiny + "data.apply_chat_template=true trainer.output_dir=" + (root / "chat").string(),
       "model.tokenizer 'char' has no chat template"},
  };
  for (const auto& [args, expected] : cases) {
    Result r = run_ppo(args);
    INFO("ppo " << args << "\n" << r.output);
    CHECK(r.status == 2);
    CHECK(count_lines(r.output, "error: ") == 1);
    CHECK_THAT(r.output, Contains(expected));
  }
}

TEST_CASE("model.path with a tokenizer.json folder: shape and tokenizer from the folder, no BOS", "[cpu][cli][hf]") {
  ppo_test::TempDir tmp;
  const fs::path root = tmp.path;
  const fs::path tok = root / "tok";
  fs::create_directories(tok);
  write_text(tok / "tokenizer.json", ppo_test::tiny_tokenizer_json().dump());
  write_text(tok / "tokenizer_config.json", R"({"bos_token": null, "eos_token": "<|im_start|>"})");
  const ppo::BpeTokenizer tokenizer(tok.string());
  REQUIRE(tokenizer.bos_id() == -1);
  // A Qwen2-like shape unlike regression_tiny's (width 64, 2 layers, vocab 99).
  ppo::ModelConfig shape = ppo_test::small_model_config(/*num_layers=*/1, /*intermediate_size=*/64, /*seed=*/0);
  shape.max_position_embeddings = 128;  // room for the chat-rendered prompts below
  shape.attention_bias = true;
  shape.tie_word_embeddings = false;
  ppo::CausalLM model(shape, tokenizer.vocab_size());
  ppo::export_hf(model, shape, (root / "hf").string(), tokenizer, tok.string());
  const std::string hf = (root / "hf").string();

  Result config = run_ppo("config " + kTiny + "model.path=" + hf);
  INFO(config.output);
  REQUIRE(config.status == 0);
  CHECK_THAT(config.output, Contains("  hidden_size: 32\n") && Contains("  num_layers: 1\n") &&
                                Contains("  vocab_size: 302\n") && Contains("  attention_bias: true\n") &&
                                Contains("  tokenizer: \"" + hf + "\""));
  Result generate = run_ppo("generate " + kTiny + "--count 2 model.path=" + hf);
  INFO(generate.output);
  REQUIRE(generate.status == 0);
  CHECK(count_lines(generate.output, "response: ") == 2 * 4);

  // With a ChatML template beside the tokenizer, data.apply_chat_template renders each prompt as a user turn; a
  // template of another form stops the run with one error line.
  write_text(fs::path(hf) / "chat_template.jinja",
             "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
             "{% endfor %}{{ '<|im_start|>assistant\\n' }}");
  Result chat = run_ppo("generate " + kTiny +
                        "--count 1 data.apply_chat_template=true data.max_prompt_length=48 model.path=" + hf);
  INFO(chat.output);
  REQUIRE(chat.status == 0);
  CHECK_THAT(chat.output, Contains("prompt:   <|im_start|>user\n") && Contains("<|im_end|>\n<|im_start|>assistant\n"));
  // This template has no enable_thinking switch: data.enable_thinking=false is refused, not ignored.
  Result no_switch = run_ppo("generate " + kTiny +
                             "--count 1 data.apply_chat_template=true data.enable_thinking=false model.path=" + hf);
  CHECK(no_switch.status == 2);
  CHECK(count_lines(no_switch.output, "error: ") == 1);
  CHECK_THAT(no_switch.output, Contains("data.enable_thinking=false") && Contains("no enable_thinking switch"));
  // A template of Qwen3's form (its switch, its reasoning bookkeeping): thinking off ends the generation prompt in an
  // empty reasoning block; on (the default) it does not.
  write_text(fs::path(hf) / "chat_template.jinja",
             "{%- set ns = namespace(last_query_index=0) %}{#- reasoning_content #}{% for m in messages %}"
             "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
             "{{ '<|im_start|>assistant\\n' }}{% if enable_thinking is defined and enable_thinking is false %}"
             "{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}");
  for (const bool thinking : {true, false}) {
    Result qwen3 = run_ppo("generate " + kTiny + "--count 1 data.apply_chat_template=true data.max_prompt_length=72 " +
                           "data.enable_thinking=" + (thinking ? "true" : "false") + " model.path=" + hf);
    INFO(qwen3.output);
    REQUIRE(qwen3.status == 0);
    CHECK_THAT(qwen3.output, Contains("<|im_end|>\n<|im_start|>assistant\n"));
    CHECK((qwen3.output.find("<|im_start|>assistant\n<think>\n\n</think>\n\n") != std::string::npos) == !thinking);
  }
  write_text(fs::path(hf) / "chat_template.jinja", "{{ bos_token }}[INST] {{ messages[0]['content'] }} [/INST]");
  Result other = run_ppo("generate " + kTiny + "--count 1 data.apply_chat_template=true model.path=" + hf);
  CHECK(other.status == 2);
  CHECK(count_lines(other.output, "error: ") == 1);
  CHECK_THAT(other.output, Contains("neither the ChatML form"));
}

TEST_CASE("ppo tokenize prints the ids of each JSON line", "[cpu][cli][hf]") {
  ppo_test::TempDir tmp;
  const fs::path root = tmp.path;
  write_text(root / "tokenizer.json", ppo_test::tiny_tokenizer_json().dump());
  write_text(root / "in.jsonl",
             "{\"text\": \"hello world\"}\n"
             "\n"
             "{\"text\": \"<|im_start|>hello<think>\", \"other\": 1}\n"
             "{\"text\": \"\"}\n");
  Result r = run_ppo("tokenize --tokenizer " + root.string() + " < " + (root / "in.jsonl").string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  // Ids derived by hand in tests/model/test_bpe.cpp: hello 259, Ġw 260, then the bytes o r l d; 300, 301 added.
  CHECK(r.output ==
        "{\"ids\":[259,260,111,114,108,100]}\n"
        "{\"ids\":[300,259,301]}\n"
        "{\"ids\":[]}\n");
  Result chars = run_ppo("tokenize char < " + (root / "in.jsonl").string());  // the built-in tokenizer, positional
  REQUIRE(chars.status == 0);
  CHECK(chars.output.rfind("{\"ids\":[76,73,80,80,83,4,91,83,86,80,72]}\n", 0) == 0);  // 'h' = 104 - 32 + 4 ...

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{\"text\": \"ok\"}\n{\"text\": \"ok\"}\n{\"text\": \"unterminated}\n", "stdin line 3: not valid JSON"},
      {"{\"text\": \"ok\"}\n\n{\"txt\": \"x\"}\n", "stdin line 3: expected an object with a string field \"text\""},
      {"[\"text\"]\n", "stdin line 1: expected an object"},
      {"{\"text\": 5}\n", "stdin line 1: expected an object with a string field"},
  };
  for (const auto& [input, expected] : bad) {
    write_text(root / "bad.jsonl", input);
    Result e = run_ppo("tokenize --tokenizer " + root.string() + " < " + (root / "bad.jsonl").string());
    INFO(input << "\n" << e.output);
    CHECK(e.status == 2);
    CHECK(count_lines(e.output, "error: ") == 1);
    CHECK_THAT(e.output, Contains(expected));
  }
  Result missing = run_ppo("tokenize --tokenizer " + (root / "nowhere").string() + " < /dev/null");
  CHECK(missing.status == 2);
  CHECK_THAT(missing.output, Contains((root / "nowhere").string()));
}
