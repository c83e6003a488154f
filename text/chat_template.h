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
// templates (those that write '\n<tool_response>\n' and '\n</tool_response>') put them in a user message,
//   <|im_start|>user\n<tool_response>\n{content}\n</tool_response><|im_end|>\n
// with consecutive tool messages sharing one user message (one <tool_response> block each); templates that never
// mention tools (SmolLM2's) render every role alike, <|im_start|>tool\n{content}<|im_end|>\n. A template that mentions
// tools otherwise (Qwen3-Coder's, LFM2's) has a tool form of its own: its tool messages, and multi-turn rollouts with
// it, are refused. Tool schemas (apply_chat_template's
// `tools`), assistant tool_calls fields and images are not rendered: a multi-turn trajectory's tool calls are the
// assistant's own text.
//
// Qwen3's template (recognised by its enable_thinking switch and reasoning_content) adds reasoning blocks:
//   - an assistant message after the last user query (a user message that is not a wrapped <tool_response>) keeps
//     its reasoning, written <think>\n{reasoning}\n</think>\n\n{answer}; the reasoning is the message's
//     "reasoning_content" or the text before "</think>" in its content (after "<think>"); the last message always gets
//     the block, an earlier one only when its reasoning is not empty;
//   - an assistant message before that query loses its reasoning (multi-turn histories): only the answer is written;
//   - with thinking off (apply_chat_template's enable_thinking=False; data.enable_thinking=false) the generation
//     prompt ends in an empty block, "<|im_start|>assistant\n<think>\n\n</think>\n\n".
// A ChatML template that writes <think> in another way (QwQ, DeepSeek-R1's distilled Qwen) is refused, not rendered
// without its reasoning rules, as is one that writes the tokenizer's bos_token or eos_token (LFM2's, Hermes').
//
// It also recognises Llama 3.1, 3.2 and 3.3's template (the "llama3" form):
//   <|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n
//   Today Date: {date}\n\n{first message's content if it is a system message}<|eot_id|>     always
//   <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>                      every other message
//   <|start_header_id|>ipython<|end_header_id|>\n\n{content as a JSON string}<|eot_id|>     a tool message
//   <|start_header_id|>assistant<|end_header_id|>\n\n                                       the generation prompt
// with every content but a tool's stripped of surrounding whitespace (Jinja's trim). {date} is the template's default
// (Llama 3.1's and 3.3's "26 Jul 2024") or, where it calls strftime_now (Llama 3.2's), today's, "%d %b %Y" as
// transformers renders it. Other Llama 3 templates (3.0's, which has no system header) are refused.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace ppo {

// A second form, "plain", is ppo.cpp's own for small models without special tokens (data.chat_template=plain):
//   System: {content}\n  User: {content}\n  Assistant: {content}\n  Tool: {content}\n   and the generation prompt
// "Assistant: ".
class ChatTemplate {
 public:
  enum class Form { chatml, plain, llama3 };
  // "<|im_start|>tool", Qwen's "<|im_start|>user\n<tool_response>", Llama 3's ipython message, or a form ppo.cpp does
  // not render
  enum class ToolForm { role, qwen, ipython, unknown };
  enum class ThinkForm { none, qwen3 };  // no reasoning blocks, or Qwen3's (above)
  explicit ChatTemplate(std::string default_system = "", Form form = Form::chatml, ToolForm tools = ToolForm::role,
                        ThinkForm think = ThinkForm::none)
      : default_system_(std::move(default_system)), form_(form), tool_form_(tools), think_form_(think) {}
  static ChatTemplate plain() { return ChatTemplate("", Form::plain); }

  // Parses a tokenizer's Jinja template (chat_template.jinja, or tokenizer_config.json's "chat_template"). A
  // template of neither form is a UsageError naming `origin` and the forms that are supported.
  static ChatTemplate from_jinja(const std::string& jinja, const std::string& origin);

  // Thinking on (the default, as the template's own when enable_thinking is not passed) or off. Off with a template
  // that has no such switch is a UsageError naming `key`.
  ChatTemplate with_thinking(bool enable, const std::string& key) const;

  // messages: [{"role": "system" | "user" | "assistant" | "tool", "content": "..."}, ...] (veRL's "prompt" field), an
  // assistant message optionally with "reasoning_content" (a string, or null). A malformed message is a UsageError.
  std::string render(const nlohmann::json& messages, bool add_generation_prompt = true) const;

  // The text a multi-turn rollout inserts after an assistant turn that called a tool, so that the trajectory reads
  // as render(messages + [that turn, {"role": "tool", "content": output}]) with the generation prompt: what closes
  // the assistant's message (with `eos_closed` the model's EOS token, end_of_message(), already did), the tool
  // message, and the generation prompt. `output` must not hold the template's markers (the caller checks).
  std::string tool_turn(const std::string& output, bool eos_closed) const;

  const std::string& default_system() const { return default_system_; }
  Form form() const { return form_; }
  ToolForm tool_form() const { return tool_form_; }
  ThinkForm think_form() const { return think_form_; }
  bool thinking() const { return thinking_; }
  // What closes a message: "<|im_end|>" (ChatML), "<|eot_id|>" (Llama 3), "" (plain).
  std::string end_of_message() const;
  // "<|im_start|>assistant\n" (plain: "Assistant: "; Qwen3 with thinking off: then "<think>\n\n</think>\n\n")
  std::string generation_prompt() const;

 private:
  std::string default_system_;
  Form form_ = Form::chatml;
  ToolForm tool_form_ = ToolForm::role;
  ThinkForm think_form_ = ThinkForm::none;
  bool thinking_ = true;
  std::string date_;  // llama3: the system header's date; "" = today's

  std::string render_assistant(const nlohmann::json& message, bool keep_reasoning, bool last) const;
  std::string render_llama3(const nlohmann::json& messages) const;
};

}  // namespace ppo
