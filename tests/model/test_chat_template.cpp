// The ChatML chat template (model/chat_template.h): recognised in a Hugging Face jinja template, its default system
// message, rendering and its errors; and when a prompt starts with a BOS of the tokenizer (train/prompts.h).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "model/bpe_tokenizer.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "tests/model/tiny_tokenizer.h"
#include "tests/usage_error.h"
#include "train/prompts.h"

using Catch::Matchers::Contains;
using ppo_test::usage_error_message;

TEST_CASE("chat template: ChatML recognised, default system message read, messages rendered", "[cpu][hfmodel]") {
  // SmolLM2 writes the newline inside its string literal; Qwen2.5 writes "\\n". Both forms give the same default.
  const std::string literal_newline =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
      "Be brief.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
      "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
  const std::string escaped_newline =
      "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
      "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nBe brief.<|im_end|>\\n' }}{%- endif %}"
      "{{- '<|im_start|>assistant\\n' }}";
  for (const std::string& jinja : {literal_newline, escaped_newline})
    CHECK(ppo::ChatTemplate::from_jinja(jinja, "t").default_system() == "Be brief.");
  // No literal system text (Qwen3): no default.
  CHECK(ppo::ChatTemplate::from_jinja("{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>' }}"
                                      "{{- '<|im_start|>assistant\\n' }}",
                                      "t")
            .default_system()
            .empty());

  const ppo::ChatTemplate chat("Be brief.");
  using json = nlohmann::json;
  CHECK(chat.render(json::parse(R"([{"role": "user", "content": "What is 2+3?"}])")) ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n");
  CHECK(
      chat.render(json::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "hi\nthere"},
                                    {"role": "assistant", "content": "yes"}])"),
                  /*add_generation_prompt=*/false) ==
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi\nthere<|im_end|>\n<|im_start|>assistant\nyes<|im_end|>\n");

  // A template of another form, and malformed messages, are UsageErrors that say what to do.
  CHECK_THAT(
      usage_error_message([] { ppo::ChatTemplate::from_jinja("{{ bos_token }}[INST] {{ m }} [/INST]", "llama2"); }),
      Contains("llama2") && Contains("not the ChatML form") && Contains("data.apply_chat_template=false"));
  CHECK_THAT(usage_error_message([&] { chat.render(json::array()); }), Contains("non-empty list"));
  CHECK_THAT(usage_error_message([&] { chat.render(json::parse(R"([{"role": "function", "content": "x"}])")); }),
             Contains("role \"function\"") && Contains("supported: system, user, assistant, tool"));
  CHECK_THAT(usage_error_message([&] { chat.render(json::parse(R"([{"role": "user"}])")); }),
             Contains("chat message 0"));
}

TEST_CASE("chat template: a long default system message and thousands of unbalanced blocks read in one pass",
          "[cpu][hf]") {
  // A std::regex once read the default system message, recursing once per character: 50,000 characters, or 5,000
  // unbalanced <|im_start|> blocks, overflowed the stack.
  const std::string system(60000, 's');
  const std::string loop =
      "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
      "'<|im_end|>\\n' }}{% endfor %}{{ '<|im_start|>assistant\\n' }}";
  CHECK(ppo::ChatTemplate::from_jinja("{{ '<|im_start|>system\\n" + system + "<|im_end|>\\n' }}" + loop, "long")
            .default_system() == system);
  std::string unbalanced, expected;  // no <|im_end|> until the end: the first block's text runs up to it
  for (int i = 0; i < 5000; ++i) unbalanced += "<|im_start|>system\nab";
  expected = unbalanced.substr(std::string("<|im_start|>system\n").size());
  CHECK(ppo::ChatTemplate::from_jinja(unbalanced + "<|im_end|>" + loop, "unbalanced").default_system() == expected);
  std::string quoted;  // each block's text leaves its string literal: no default system message
  for (int i = 0; i < 5000; ++i) quoted += "<|im_start|>system\n'x";
  CHECK(ppo::ChatTemplate::from_jinja(quoted + "<|im_end|>" + loop, "quoted").default_system().empty());
}

TEST_CASE("hf prompts of a tokenizer without BOS start with the prompt's own tokens", "[cpu][hfmodel]") {
  const ppo::BpeTokenizer bpe(ppo_test::tiny_tokenizer_json(), "tiny");
  REQUIRE(bpe.bos_id() == -1);
  ppo::TaskSample sample;
  sample.prompt = "hello world";
  CHECK(ppo::encode_prompt(bpe, sample, 64) == std::vector<int64_t>{259, 260, 'o', 'r', 'l', 'd'});
  const ppo::CharTokenizer chars;  // has a BOS: it comes first
  CHECK(ppo::encode_prompt(chars, sample, 64).front() == ppo::CharTokenizer::kBos);
  CHECK(ppo::encode_prompt(chars, sample, 64).size() == sample.prompt.size() + 1);
  sample.prompt = "";
  CHECK_THAT(usage_error_message([&] { ppo::encode_prompt(bpe, sample, 64); }), Contains("no BOS"));
}

TEST_CASE("hf a BOS is added to plain prompts only as the post-processor or add_bos_token says", "[cpu][hfmodel]") {
  using json = nlohmann::json;
  json with_bos = ppo_test::tiny_tokenizer_json();
  with_bos["post_processor"] = json::parse(R"({"type": "Sequence", "processors": [
      {"type": "ByteLevel"},
      {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}},
                                               {"Sequence": {"id": "A", "type_id": 0}}]}]})");
  const json bos_config = {{"bos_token", "<|im_start|>"}};
  ppo::TaskSample sample;
  sample.prompt = "hello";
  // The post-processor puts the BOS first (Llama 3): plain prompts get it, chat-rendered ones do not.
  const ppo::BpeTokenizer adds(with_bos, "adds", bos_config);
  CHECK(adds.add_bos());
  CHECK(ppo::encode_prompt(adds, sample, 64) == std::vector<int64_t>{300, 259});
  const ppo::ChatTemplate chat;
  CHECK(ppo::encode_prompt(adds, sample, 64, &chat).front() == 300);  // the template's own <|im_start|>
  CHECK(ppo::prompt_text(sample, &chat) == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n");
  // A bos_token the post-processor does not add (SmolLM2 names <|im_start|>): no BOS.
  const ppo::BpeTokenizer names_only(ppo_test::tiny_tokenizer_json(), "names", bos_config);
  CHECK_FALSE(names_only.add_bos());
  CHECK(ppo::encode_prompt(names_only, sample, 64) == std::vector<int64_t>{259});
  // add_bos_token in tokenizer_config.json wins over the post-processor.
  CHECK_FALSE(ppo::BpeTokenizer(with_bos, "off", {{"bos_token", "<|im_start|>"}, {"add_bos_token", false}}).add_bos());
  CHECK(
      ppo::BpeTokenizer(ppo_test::tiny_tokenizer_json(), "on", {{"bos_token", "<|im_start|>"}, {"add_bos_token", true}})
          .add_bos());
  CHECK_THAT(usage_error_message([&] {
               ppo::BpeTokenizer(ppo_test::tiny_tokenizer_json(), "x", {{"add_bos_token", true}});
             }),
             Contains("no bos_token"));
  // A sample's chat form: its messages, then its response prefix.
  sample.messages = json::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}])");
  sample.response_prefix = "<think>";
  CHECK(ppo::prompt_text(sample, &chat) ==
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>");
  CHECK(ppo::prompt_text(sample, nullptr) == "hello");
}
