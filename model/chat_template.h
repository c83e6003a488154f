// Chat templates: a conversation rendered into the prompt text an instruct model was trained on, as transformers'
// tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) renders it.
//
// ppo.cpp runs no Jinja. It recognises the ChatML form, which SmolLM2 and the Qwen2/2.5/3 families use:
//   [<|im_start|>system\n{default system}<|im_end|>\n]    only when the first message is not a system message
//   <|im_start|>{role}\n{content}<|im_end|>\n            for every message
//   <|im_start|>assistant\n                              the generation prompt
// The default system message is read from the template itself (SmolLM2: "You are a helpful AI assistant named
// SmolLM, trained by Hugging Face"; Qwen2.5: "You are Qwen, created by Alibaba Cloud. You are a helpful
// assistant."; Qwen3 has none). Tools, images and the assistant-side extras of some templates (Qwen3's reasoning
// blocks) are not rendered: conversations are system, user and assistant messages with plain-text content.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace ppo {

// A second form, "plain", is ppo.cpp's own for small models without special tokens (data.chat_template=plain):
//   System: {content}\n  User: {content}\n  Assistant: {content}\n   and the generation prompt "Assistant: ".
class ChatTemplate {
 public:
  enum class Form { chatml, plain };
  explicit ChatTemplate(std::string default_system = "", Form form = Form::chatml)
      : default_system_(std::move(default_system)), form_(form) {}
  static ChatTemplate plain() { return ChatTemplate("", Form::plain); }

  // Parses a tokenizer's Jinja template (chat_template.jinja, or tokenizer_config.json's "chat_template"). A
  // template that is not ChatML is a UsageError naming `origin` and the forms that are supported.
  static ChatTemplate from_jinja(const std::string& jinja, const std::string& origin);

  // messages: [{"role": "system" | "user" | "assistant", "content": "..."}, ...] (veRL's "prompt" field). A
  // malformed message is a UsageError.
  std::string render(const nlohmann::json& messages, bool add_generation_prompt = true) const;

  const std::string& default_system() const { return default_system_; }
  Form form() const { return form_; }

 private:
  std::string default_system_;
  Form form_ = Form::chatml;
};

}  // namespace ppo
