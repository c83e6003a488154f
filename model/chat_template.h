// Chat templates: a conversation rendered into the prompt text an instruct model was trained on, as transformers'
// tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) renders it.
//
// ppo.cpp runs no Jinja. It recognises the ChatML form, which SmolLM2 and the Qwen2/2.5/3 families use:
//   [<|im_start|>system\n{default system}<|im_end|>\n]    only when the first message is not a system message
//   <|im_start|>{role}\n{content}<|im_end|>\n            for every message
//   <|im_start|>assistant\n                              the generation prompt
// The default system message is read from the template itself (SmolLM2: "You are a helpful AI assistant named
// SmolLM, trained by Hugging Face"; Qwen2.5: "You are Qwen, created by Alibaba Cloud. You are a helpful
// assistant."; Qwen3 has none). Tool messages (role "tool") render as the template does it: Qwen2.5's and Qwen3's
// templates (those that write "<tool_response>") put them in a user message,
//   <|im_start|>user\n<tool_response>\n{content}\n</tool_response><|im_end|>\n
// with consecutive tool messages sharing one user message (one <tool_response> block each); templates that render
// every role alike (SmolLM2's) give <|im_start|>tool\n{content}<|im_end|>\n. Tool schemas (apply_chat_template's
// `tools`), assistant tool_calls fields, images and Qwen3's reasoning blocks are not rendered: a multi-turn
// trajectory's tool calls are the assistant's own text.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace ppo {

// A second form, "plain", is ppo.cpp's own for small models without special tokens (data.chat_template=plain):
//   System: {content}\n  User: {content}\n  Assistant: {content}\n  Tool: {content}\n   and the generation prompt
// "Assistant: ".
class ChatTemplate {
 public:
  enum class Form { chatml, plain };
  enum class ToolForm { role, qwen };  // "<|im_start|>tool" or Qwen's "<|im_start|>user\n<tool_response>"
  explicit ChatTemplate(std::string default_system = "", Form form = Form::chatml, ToolForm tools = ToolForm::role)
      : default_system_(std::move(default_system)), form_(form), tool_form_(tools) {}
  static ChatTemplate plain() { return ChatTemplate("", Form::plain); }

  // Parses a tokenizer's Jinja template (chat_template.jinja, or tokenizer_config.json's "chat_template"). A
  // template that is not ChatML is a UsageError naming `origin` and the forms that are supported.
  static ChatTemplate from_jinja(const std::string& jinja, const std::string& origin);

  // messages: [{"role": "system" | "user" | "assistant" | "tool", "content": "..."}, ...] (veRL's "prompt" field). A
  // malformed message is a UsageError.
  std::string render(const nlohmann::json& messages, bool add_generation_prompt = true) const;

  // The text a multi-turn rollout inserts after an assistant turn that called a tool, so that the trajectory reads
  // as render(messages + [that turn, {"role": "tool", "content": output}]) with the generation prompt: what closes
  // the assistant's message (with `eos_closed` the model's EOS token, ChatML's <|im_end|>, already did), the tool
  // message, and the generation prompt. `output` must not hold the template's markers (the caller checks).
  std::string tool_turn(const std::string& output, bool eos_closed) const;

  const std::string& default_system() const { return default_system_; }
  Form form() const { return form_; }
  ToolForm tool_form() const { return tool_form_; }
  std::string generation_prompt() const;  // "<|im_start|>assistant\n" (plain: "Assistant: ")

 private:
  std::string default_system_;
  Form form_ = Form::chatml;
  ToolForm tool_form_ = ToolForm::role;
};

}  // namespace ppo
