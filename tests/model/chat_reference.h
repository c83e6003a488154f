// Chat conversations rendered by ppo.cpp and by transformers' apply_chat_template side by side ([ref]): the
// conversations the chat tests share (plain, K&K, reasoning, tool messages), transformers' answers through
// tests/reference/hf_chat.py, and ppo.cpp's rendering and encoding as the trainer feeds them.
#pragma once

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "common/jsonl.h"
#include "tasks/kk.h"
#include "tests/reference/reference.h"
#include "tests/temp_dir.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "train/prompts.h"

namespace ppo_test {

using json = nlohmann::json;
using Rows = std::vector<std::vector<int64_t>>;

using Conversation = std::pair<json, std::string>;  // messages, response prefix

// K&K puzzles of 2..5 people in Logic-RL's chat form, and plain chats (default system message, a system message of
// their own, several turns, digits, non-ASCII text).
inline std::vector<Conversation> chat_conversations() {
  std::vector<Conversation> out;
  for (const ppo::TaskSample& s : ppo::KkTask().generate(4, 2, 5, 7)) out.emplace_back(s.messages, s.response_prefix);
  const auto user = [](const std::string& text) { return json::array({{{"role", "user"}, {"content", text}}}); };
  out.emplace_back(user("What is the capital of France?"), "");
  out.emplace_back(json::parse(R"([{"role": "system", "content": "You are a concise assistant."},
                                   {"role": "user", "content": "List three prime numbers."},
                                   {"role": "assistant", "content": "2, 3, 5."},
                                   {"role": "user", "content": "And the next two?"}])"),
                   "");
  out.emplace_back(user("Compute 12345 + 67890 and explain each step."), "");
  out.emplace_back(user("Übersetze bitte: \"Guten Morgen, wie geht's?\" 😀\n\tDanke!"), "");
  return out;
}

struct RenderedChat {
  std::vector<std::string> texts;
  Rows ids;
};

// hf_chat.py: transformers' apply_chat_template for each conversation (with `template_file`'s template when given).
// hf_chat.py's answers, one a conversation: {"text", "ids"}, or {"error"} where the template raised.
inline std::vector<json> transformers_answers(const std::string& tokenizer_dir,
                                              const std::vector<Conversation>& conversations,
                                              const std::string& template_file, const json& kwargs) {
  TempDir tmp("ppo_hf_chat");
  {
    std::ofstream in(tmp.sub("in.jsonl"));
    for (const auto& [messages, prefix] : conversations)
      in << json{{"messages", messages}, {"prefix", prefix}, {"kwargs", kwargs}} << "\n";
  }
  run_reference("hf_chat.py", "\"" + tokenizer_dir + "\" " +
                                  (template_file.empty() ? "" : "\"" + template_file + "\" ") + "< \"" +
                                  tmp.sub("in.jsonl") + "\" > \"" + tmp.sub("out.jsonl") + "\"");
  std::vector<json> out = ppo::read_jsonl(tmp.sub("out.jsonl"));
  REQUIRE(out.size() == conversations.size());
  return out;
}

inline RenderedChat transformers_chats(const std::string& tokenizer_dir, const std::vector<Conversation>& conversations,
                                       const std::string& template_file = "", const json& kwargs = json::object()) {
  RenderedChat out;
  for (const json& line : transformers_answers(tokenizer_dir, conversations, template_file, kwargs)) {
    INFO(line.dump());
    REQUIRE(line.contains("text"));
    out.texts.push_back(line.at("text").get<std::string>());
    out.ids.push_back(line.at("ids").get<std::vector<int64_t>>());
  }
  return out;
}

// ppo.cpp's rendering and encoding of the same conversations (train/prompts.h, as the trainer feeds them).
inline RenderedChat ppo_chats(const ppo::Tokenizer& tokenizer, const ppo::ChatTemplate& chat,
                              const std::vector<Conversation>& conversations) {
  RenderedChat out;
  for (const auto& [messages, prefix] : conversations) {
    ppo::TaskSample sample;
    sample.messages = messages;
    sample.response_prefix = prefix;
    out.texts.push_back(ppo::prompt_text(sample, &chat));
    out.ids.push_back(ppo::encode_prompt(tokenizer, sample, 4096, &chat));
  }
  return out;
}

inline void check_same_chats(const RenderedChat& ours, const RenderedChat& ref) {
  for (size_t i = 0; i < ref.texts.size(); ++i) {
    INFO("conversation " << i << "\ntransformers: " << ref.texts[i] << "\nppo.cpp:      " << ours.texts[i]);
    CHECK(ours.texts[i] == ref.texts[i]);
    CHECK(ours.ids[i] == ref.ids[i]);
  }
}

inline json message(const std::string& role, const std::string& content) {
  return {{"role", role}, {"content", content}};
}

// Conversations with reasoning: earlier assistant turns that thought (their reasoning dropped before the last query,
// kept after it), reasoning given as reasoning_content, empty, unopened or repeated blocks, a user message that only
// wraps a tool response (not a query), and newlines around both parts.
inline std::vector<Conversation> reasoning_conversations() {
  json given = message("assistant", "The answer is 5.");
  given["reasoning_content"] = "2 + 3 = 5";
  json null_given = message("assistant", "<think>\nfrom the content\n</think>\n\nFive.");
  null_given["reasoning_content"] = nullptr;
  const auto conversation = [](std::initializer_list<json> messages) { return Conversation{json(messages), ""}; };
  return {
      conversation({message("user", "2+3?"), message("assistant", "<think>\nadd them\n</think>\n\n5"),
                    message("user", "and 4+4?")}),
      conversation({message("system", "Think first."), message("user", "2+3?"),
                    message("assistant", "<think>\nadd them\n</think>\n\n5"), message("user", "and 4+4?"),
                    message("assistant", "<think>\n\n4 and 4\n\n</think>\n\n\n8")}),
      conversation({message("user", "2+3?"), given}),
      conversation({message("user", "2+3?"), null_given, message("user", "sure?")}),
      conversation({message("user", "q"), message("assistant", "<think></think>a"), message("user", "q2"),
                    message("assistant", "no reasoning here")}),
      conversation({message("user", "q"), message("assistant", "</think>only a close"),
                    message("assistant", "<think>a</think>b</think>c")}),
      conversation({message("user", "look it up"),
                    message("assistant", "<think>\nneed the tool\n</think>\n\n<tool_call>\n{}\n</tool_call>"),
                    message("user", "<tool_response>\n42\n</tool_response>"),
                    message("assistant", "<think>\ngot it\n</think>\n\nIt is 42.")}),
      conversation({message("user", "look it up"), message("assistant", "<think>\nplan\n</think>\n\ncall"),
                    message("tool", "42"), message("assistant", "plain answer"), message("tool", "43")}),
  };
}

// Conversations of the shapes a multi-turn rollout makes: assistant turns that call a tool, the tool's answer (one,
// or two in a row), the turns after it.
inline std::vector<Conversation> tool_conversations() {
  const json call = message("assistant",
                            "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": "
                            "\"12 * 34\"}}\n</tool_call>");
  return {
      {json::array({message("user", "What is 12 * 34?"), call, message("tool", "408")}), ""},
      {json::array({message("system", "Use the calculator."), message("user", "What is 12 * 34 + 1?"), call,
                    message("tool", "408"), message("assistant", "<tool_call>408 + 1</tool_call>"),
                    message("tool", "409")}),
       ""},
      {json::array({message("user", "Weather in Paris and Oslo?"), call, message("tool", "{\"paris\": 21}"),
                    message("tool", "oslo: 12 °C\nwindy")}),
       ""},
      {json::array({message("user", "What is 12 * 34?"), call, message("tool", "408"),
                    message("assistant", "It is 408."), message("user", "Thanks!")}),
       ""},
  };
}

// The plain chats, the reasoning ones and the tool ones.
inline std::vector<Conversation> all_conversations() {
  std::vector<Conversation> out = chat_conversations();
  for (auto* more : {&reasoning_conversations, &tool_conversations})
    for (Conversation& c : more()) out.push_back(std::move(c));
  return out;
}

}  // namespace ppo_test
