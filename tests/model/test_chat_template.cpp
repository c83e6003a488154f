// The ChatML chat template (text/chat_template.h): recognised in a Hugging Face jinja template, its default system
// message, rendering and its errors; and when a prompt starts with a BOS of the tokenizer (train/prompts.h).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <regex>
#include <string>
#include <vector>

#include "tests/model/tiny_tokenizer.h"
#include "tests/usage_error.h"
#include "text/bpe_tokenizer.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
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
      Contains("llama2") && Contains("neither the ChatML form") && Contains("data.apply_chat_template=false"));
  CHECK_THAT(usage_error_message([&] { chat.render(json::array()); }), Contains("non-empty list"));
  CHECK_THAT(usage_error_message([&] { chat.render(json::parse(R"([{"role": "function", "content": "x"}])")); }),
             Contains("role \"function\"") && Contains("supported: system, user, assistant, tool"));
  CHECK_THAT(usage_error_message([&] { chat.render(json::parse(R"([{"role": "user"}])")); }),
             Contains("chat message 0"));
}

TEST_CASE("chat template: Qwen3's reasoning blocks and its enable_thinking switch", "[cpu][hfmodel]") {
  using json = nlohmann::json;
  // Qwen3's form is recognised by its switch, its reasoning_content, its last-query bookkeeping and its empty block.
  const std::string qwen3_markers =
      "<|im_start|>assistant<|im_end|>{%- set ns = namespace(last_query_index=0) %}{#- reasoning_content #}"
      "{% if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
      "{% endif %}";
  const ppo::ChatTemplate on = ppo::ChatTemplate::from_jinja(qwen3_markers, "qwen3");
  REQUIRE(on.think_form() == ppo::ChatTemplate::ThinkForm::qwen3);
  CHECK(on.thinking());
  const ppo::ChatTemplate off = on.with_thinking(false, "data.enable_thinking");
  CHECK(on.generation_prompt() == "<|im_start|>assistant\n");
  CHECK(off.generation_prompt() == "<|im_start|>assistant\n<think>\n\n</think>\n\n");

  // Before the last user query an assistant message keeps only its answer; after it, its reasoning block.
  const json history = json::parse(R"([
      {"role": "user", "content": "q1"},
      {"role": "assistant", "content": "<think>\nr1\n</think>\n\na1"},
      {"role": "user", "content": "q2"},
      {"role": "assistant", "content": "\n\n<think>\n\nr2\n</think>a2"}])");
  CHECK(on.render(history, false) ==
        "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nr2\n</think>\n\na2<|im_end|>\n");
  // reasoning_content wins over the content's block; an empty reasoning gets a block only in the last message; a
  // user message that only wraps a tool response is not a query.
  const json given = json::parse(R"([
      {"role": "user", "content": "q"},
      {"role": "assistant", "content": "a", "reasoning_content": "given"},
      {"role": "user", "content": "<tool_response>\n1\n</tool_response>"},
      {"role": "assistant", "content": "b"}])");
  CHECK(on.render(given, false) ==
        "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\ngiven\n</think>\n\na<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n1\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\nb<|im_end|>\n");
  const json not_last = json::parse(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                                        {"role": "assistant", "content": "b"}])");
  CHECK(off.render(not_last) ==
        "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\nb<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // A multi-turn tool turn with thinking off ends in the empty block too.
  CHECK(off.tool_turn("7", true) == "\n<|im_start|>tool\n7<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  CHECK_THAT(usage_error_message(
                 [&] { on.render(json::parse(R"([{"role": "assistant", "content": "a", "reasoning_content": 3}])")); }),
             Contains("chat message 0: reasoning_content must be a string or null"));

  // A template without the switch: thinking off is refused; on changes nothing. Other reasoning forms are refused.
  const ppo::ChatTemplate chatml;
  CHECK(chatml.with_thinking(true, "data.enable_thinking").generation_prompt() == "<|im_start|>assistant\n");
  CHECK_THAT(usage_error_message([&] { chatml.with_thinking(false, "data.enable_thinking"); }),
             Contains("data.enable_thinking=false") && Contains("no enable_thinking switch"));
  CHECK(chatml.render(history, false).find("<think>\nr1") != std::string::npos);  // ChatML keeps content as is
  for (const std::string& jinja :
       {std::string("<|im_start|>assistant<|im_end|>{{ '<|im_start|>assistant\\n<think>\\n' }}"),  // QwQ's
        qwen3_markers + "{{- '<think>\\n' }}"}) {  // Qwen3.5's: a block opened in every generation prompt
    CHECK_THAT(usage_error_message([&] { ppo::ChatTemplate::from_jinja(jinja, "other"); }),
               Contains("other: the chat template writes <think> reasoning blocks, but not as Qwen3's does"));
  }
}

TEST_CASE("chat template: Llama 3.1-3.3's form, its system header's date, trimmed contents, ipython tool messages",
          "[cpu][hfmodel]") {
  using json = nlohmann::json;
  // The pieces by which Llama 3.1-3.3's template is recognised (the whole is checked against transformers in
  // tests/model/test_hf_reference.cpp).
  const std::string markers =
      "{{- bos_token }}{%- set date_string = \"26 Jul 2024\" %}{{- \"Cutting Knowledge Date: December 2023\\n\" }}"
      "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}{{- '<|start_header_id|>' + message['role'] + "
      "'<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}"
      "{{- \"<|start_header_id|>ipython<|end_header_id|>\\n\\n\" }}";
  const ppo::ChatTemplate llama = ppo::ChatTemplate::from_jinja(markers, "llama3.1");
  REQUIRE(llama.form() == ppo::ChatTemplate::Form::llama3);
  CHECK(llama.tool_form() == ppo::ChatTemplate::ToolForm::ipython);
  CHECK(llama.end_of_message() == "<|eot_id|>");
  const std::string header =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
      "Today Date: 26 Jul 2024\n\n";
  CHECK(llama.render(json::parse(R"([{"role": "system", "content": " S\n"}, {"role": "user", "content": "\tq \u3000"},
                                     {"role": "tool", "content": " 4\"08\n"}])")) ==
        header +
            "S<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nq<|eot_id|>"
            "<|start_header_id|>ipython<|end_header_id|>\n\n\" 4\\\"08\\n\"<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  CHECK(llama.render(json::parse(R"([{"role": "user", "content": "q"}])"), false) ==
        header + "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nq<|eot_id|>");
  CHECK(llama.tool_turn("7", /*eos_closed=*/false) ==
        "<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"7\"<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // Llama 3.2's dates the header today, as strftime_now("%d %b %Y").
  std::string dated = markers;
  dated.replace(dated.find("{%- set date_string"), std::string("{%- set date_string = \"26 Jul 2024\" %}").size(),
                "{%- set date_string = strftime_now(\"%d %b %Y\") %}");
  const std::string today = ppo::ChatTemplate::from_jinja(dated, "llama3.2").render(json::parse(R"([{"role": "user",
                                                                                           "content": "q"}])"));
  CHECK(today.find("Today Date: 26 Jul 2024") == std::string::npos);
  CHECK(std::regex_search(today, std::regex("Today Date: [0-3][0-9] [A-Z][a-z][a-z] 2[0-9]{3}\\n\\n<\\|eot_id\\|>")));
  // Llama 3.0's template (no system header) is refused, naming what is rendered.
  CHECK_THAT(usage_error_message([] {
               ppo::ChatTemplate::from_jinja(
                   "{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + "
                   "m['content'] | trim + '<|eot_id|>' }}{% endfor %}",
                   "llama3.0");
             }),
             Contains("llama3.0: a Llama 3 chat template, but not Llama 3.1-3.3's"));
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
