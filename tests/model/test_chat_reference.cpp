// Chat templates against transformers' apply_chat_template ([ref]): SmolLM2's, Qwen2.5's, Qwen3's (reasoning blocks,
// thinking on and off) and Llama 3.1-3.3's, tool messages and multi-turn trajectories, and every template of
// llama.cpp's collection that ppo.cpp accepts (tests/model/chat_reference.h renders both sides).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "tests/model/chat_reference.h"
#include "tests/paths.h"
#include "tests/reference/reference.h"
#include "tests/temp_dir.h"
#include "text/bpe_tokenizer.h"
#include "text/chat_template.h"
#include "train/prompts.h"

using namespace ppo_test;  // the shared conversations and renderers (tests/model/chat_reference.h)

TEST_CASE("SmolLM2-135M-Instruct: chat template rendering and tokenisation equal transformers'", "[cpu][hf][ref]") {
  const std::string dir = ppo_test::ref_path("smollm2-135m-instruct");
  const ppo::BpeTokenizer tokenizer(dir);
  CHECK_FALSE(tokenizer.add_bos());  // bos_token <|im_start|>, but the post-processor adds nothing
  const ppo::ChatTemplate chat = ppo::ChatTemplate::from_jinja(tokenizer.chat_template(), dir);
  CHECK(chat.default_system() == "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  const auto conversations = chat_conversations();
  const RenderedChat ours = ppo_chats(tokenizer, chat, conversations);
  check_same_chats(ours, transformers_chats(dir, conversations));
  std::printf(
      "smollm2: %zu chat prompts rendered and tokenized as transformers does (%zu..%zu tokens)\n", ours.ids.size(),
      std::min_element(ours.ids.begin(), ours.ids.end(), [](auto& a, auto& b) { return a.size() < b.size(); })->size(),
      std::max_element(ours.ids.begin(), ours.ids.end(), [](auto& a, auto& b) { return a.size() < b.size(); })->size());
}

TEST_CASE("Qwen3's chat template: thinking on and off, reasoning kept and dropped, tools, equal to transformers'",
          "[cpu][hf][ref]") {
  // Qwen3's tokenizer (Qwen2.5's vocabulary, its 26 added tokens) with Qwen3-0.6B's template as llama.cpp keeps it.
  const std::string dir = ppo_test::ref_path("tokenizers/qwen3");
  const ppo::BpeTokenizer tokenizer(dir);
  REQUIRE(tokenizer.encode("<think>x</think>").size() == 3);  // <think> and </think> are single added tokens
  const ppo::ChatTemplate chat = ppo::ChatTemplate::from_jinja(tokenizer.chat_template(), dir);
  CHECK(chat.think_form() == ppo::ChatTemplate::ThinkForm::qwen3);
  CHECK(chat.tool_form() == ppo::ChatTemplate::ToolForm::qwen);
  CHECK(chat.default_system().empty());
  std::vector<Conversation> conversations = all_conversations();
  size_t tokens = 0;
  for (const bool thinking : {true, false}) {
    INFO("enable_thinking " << thinking);
    const ppo::ChatTemplate switched = chat.with_thinking(thinking, "data.enable_thinking");
    const RenderedChat ours = ppo_chats(tokenizer, switched, conversations);
    const json kwargs = thinking ? json::object() : json{{"enable_thinking", false}};
    check_same_chats(ours, transformers_chats(dir, conversations, "", kwargs));
    for (const auto& ids : ours.ids) tokens += ids.size();
  }
  std::printf(
      "qwen3: %zu conversations, thinking on and off, rendered and tokenized as transformers does (%zu tokens)\n",
      conversations.size(), tokens);
}

TEST_CASE(
    "llama.cpp's chat templates: each ppo.cpp accepts renders as transformers does, or the conversation is refused",
    "[cpu][hf][ref]") {
  // llama.cpp's copies of models' published templates (scripts/ref_templates.py): ppo.cpp reads them without Jinja,
  // so every one it accepts must render every conversation transformers renders exactly as transformers does, or
  // refuse that conversation with a UsageError (a tool message in a tool form it does not know); none may be
  // silently different.
  // Each template is rendered with special tokens of its family (its bos_token): Llama 3's for its form, Qwen3's
  // (no BOS) for the others.
  const std::string qwen3 = ppo_test::ref_path("tokenizers/qwen3"), llama3 = ppo_test::ref_path("tokenizers/llama3");
  std::vector<Conversation> conversations = all_conversations();
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(ppo_test::ref_path("llama.cpp/templates")))
    files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 50);
  std::vector<std::string> accepted;
  size_t compared = 0, refused = 0, raised = 0;
  for (const std::string& file : files) {
    std::ifstream in(file);
    const std::string jinja((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::optional<ppo::ChatTemplate> chat;
    try {
      chat = ppo::ChatTemplate::from_jinja(jinja, file);
    } catch (const ppo::UsageError&) {
      continue;
    }
    accepted.push_back(std::filesystem::path(file).filename().string());
    const std::string& dir = chat->form() == ppo::ChatTemplate::Form::llama3 ? llama3 : qwen3;
    const std::vector<json> ref = transformers_answers(dir, conversations, file, json::object());
    for (size_t i = 0; i < conversations.size(); ++i) {
      if (ref[i].contains("error")) {
        ++raised;
        continue;
      }
      try {
        const std::string ours = chat->render(conversations[i].first) + conversations[i].second;
        INFO(file << ", conversation " << i << "\ntransformers: " << ref[i].at("text").get<std::string>()
                  << "\nppo.cpp:      " << ours);
        CHECK(ours == ref[i].at("text").get<std::string>());
        ++compared;
      } catch (const ppo::UsageError&) {
        ++refused;
      }
    }
  }
  std::string names;
  for (const std::string& name : accepted) names += " " + name;
  std::printf(
      "llama.cpp templates: %zu of %zu accepted (%s); %zu renders equal to transformers', %zu refused by "
      "ppo.cpp, %zu raised by the template\n",
      accepted.size(), files.size(), names.c_str() + 1, compared, refused, raised);
  // The families ppo.cpp names as its own are among them.
  for (const char* name : {"Qwen-Qwen3-0.6B.jinja", "Qwen-Qwen2.5-7B-Instruct.jinja"})
    CHECK(std::find(accepted.begin(), accepted.end(), name) != accepted.end());
  // Refused: the other reasoning forms, and ChatML templates that write the tokenizer's BOS.
  for (const char* name : {"Qwen-QwQ-32B.jinja", "Qwen3.5-4B.jinja", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
                           "LFM2-8B-A1B.jinja", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"})
    CHECK(std::find(accepted.begin(), accepted.end(), name) == accepted.end());
}

TEST_CASE("Llama 3.1, 3.2 and 3.3's chat templates: rendering and tokenisation equal transformers'", "[cpu][hf][ref]") {
  // Llama 3's tokenizer (llama-models' tokenizer.model) with each template as llama.cpp keeps it: 3.1's and 3.3's
  // date their system header 26 Jul 2024, 3.2's today.
  const std::string dir = ppo_test::ref_path("tokenizers/llama3");
  const ppo::BpeTokenizer tokenizer(dir);
  std::vector<Conversation> conversations = all_conversations();
  conversations.push_back(
      {json::array({message("system", "  padded system \n"), message("user", "\u3000wide space\u00a0"),
                    message("assistant", "\n answer \t"), message("tool", "tab\there \"quoted\" é")}),
       ""});
  for (const char* name : {"meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja",
                           "meta-llama-Llama-3.3-70B-Instruct.jinja"}) {
    INFO(name);
    const std::string file = ppo_test::ref_path(std::string("llama.cpp/templates/") + name);
    std::ifstream in(file);
    const ppo::ChatTemplate chat = ppo::ChatTemplate::from_jinja(
        std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()), file);
    CHECK(chat.form() == ppo::ChatTemplate::Form::llama3);
    const RenderedChat ours = ppo_chats(tokenizer, chat, conversations);
    CHECK(ours.ids.front().front() == 128000);  // <|begin_of_text|>, once: the template writes it, not the encoder
    check_same_chats(ours, transformers_chats(dir, conversations, file));
  }
}

TEST_CASE("Qwen2.5's chat form: rendering and tokenisation equal transformers'", "[cpu][hf][ref]") {
  // The ChatML form with Qwen2.5's default system message ("You are Qwen, created by Alibaba Cloud. You are a helpful
  // assistant.", from Qwen2.5's published template), written here with "\n" escapes as Qwen's template writes them;
  // transformers runs it as Jinja, ppo.cpp reads it.
  const std::string jinja =
      "{%- if messages[0]['role'] == 'system' %}"
      "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
      "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
      "assistant.<|im_end|>\\n' }}{%- endif %}"
      "{%- for message in messages %}{%- if not (loop.first and message['role'] == 'system') %}"
      "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
      "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
  ppo_test::TempDir tmp("ppo_qwen_chat");
  std::ofstream(tmp.sub("template.jinja")) << jinja;
  const std::string dir = ppo_test::ref_path("tokenizers/qwen2.5");
  const ppo::BpeTokenizer tokenizer(dir);
  const ppo::ChatTemplate chat = ppo::ChatTemplate::from_jinja(jinja, "qwen2.5");
  CHECK(chat.default_system() == "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  const auto conversations = chat_conversations();
  check_same_chats(ppo_chats(tokenizer, chat, conversations),
                   transformers_chats(dir, conversations, tmp.sub("template.jinja")));
}

TEST_CASE("tool messages and multi-turn trajectories render as transformers does (SmolLM2, Qwen2.5, Qwen3, Llama 3.2)",
          "[cpu][hf][ref][multi_turn]") {
  struct Case {
    std::string dir, template_file;
    ppo::ChatTemplate::ToolForm form;
  };
  // Qwen2.5-Instruct's and Qwen3's templates as Qwen publishes them (llama.cpp's copies), tools branch included.
  for (const Case& m : {Case{ppo_test::ref_path("smollm2-135m-instruct"), "", ppo::ChatTemplate::ToolForm::role},
                        Case{ppo_test::ref_path("tokenizers/qwen2.5"),
                             ppo_test::ref_path("llama.cpp/templates/Qwen-Qwen2.5-7B-Instruct.jinja"),
                             ppo::ChatTemplate::ToolForm::qwen},
                        Case{ppo_test::ref_path("tokenizers/qwen3"), "", ppo::ChatTemplate::ToolForm::qwen},
                        Case{ppo_test::ref_path("tokenizers/llama3"),
                             ppo_test::ref_path("llama.cpp/templates/meta-llama-Llama-3.2-3B-Instruct.jinja"),
                             ppo::ChatTemplate::ToolForm::ipython}}) {
    INFO(m.dir);
    const ppo::BpeTokenizer tokenizer(m.dir);
    std::string jinja = tokenizer.chat_template();
    if (!m.template_file.empty()) {
      std::ifstream in(m.template_file);
      jinja.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const ppo::ChatTemplate chat = ppo::ChatTemplate::from_jinja(jinja, m.dir);
    CHECK(chat.tool_form() == m.form);
    const std::vector<Conversation> conversations = tool_conversations();
    check_same_chats(ppo_chats(tokenizer, chat, conversations),
                     transformers_chats(m.dir, conversations, m.template_file));
    // A trajectory as a rollout builds it: the prompt with the generation prompt, then each assistant turn's text,
    // the model's EOS (<|im_end|>) where it ended the turn, and the text ppo.cpp inserts for the tool's answer. The
    // second turn here ended at the stop string "</tool_call>", without EOS.
    REQUIRE(tokenizer.decode({tokenizer.eos_id()}, /*skip_special=*/false) == chat.end_of_message());
    const json& messages = conversations[1].first;
    ppo::TaskSample prompt;
    prompt.messages = json::array({messages[0], messages[1]});
    const std::string ours = ppo::prompt_text(prompt, &chat) + messages[2]["content"].get<std::string>() +
                             chat.end_of_message() + chat.tool_turn("408", /*eos_closed=*/true) +
                             messages[4]["content"].get<std::string>() + chat.tool_turn("409", /*eos_closed=*/false);
    const RenderedChat ref = transformers_chats(m.dir, {{messages, ""}}, m.template_file);
    INFO("transformers: " << ref.texts[0] << "\nppo.cpp:      " << ours);
    CHECK(ours == ref.texts[0]);
  }
}
