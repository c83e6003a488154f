// See model/chat_template.h.
#include "model/chat_template.h"

#include <cctype>

#include "common/chat_roles.h"
#include "common/error.h"

namespace ppo {

using json = nlohmann::json;

namespace {

// A Jinja string literal's escapes, as far as a default system message uses them.
std::string unescape_jinja(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      const char c = text[++i];
      out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
    } else {
      out += text[i];
    }
  }
  return out;
}

// The default system message: a literal "<|im_start|>system\n...<|im_end|>" inside one string literal (the newline
// written as is or as \n), its text free of quotes and braces (which would mean it leaves the literal). The first
// such block wins; "" when there is none (templates that take the system text from the messages only). One pass:
// the next <|im_end|> and the next quote or brace only move forward as the candidate starts do (a std::regex here
// recursed once per character and overflowed the stack on a long template).
std::string default_system_message(const std::string& jinja) {
  static const std::string kStart = "<|im_start|>system", kEnd = "<|im_end|>";
  size_t end = 0, bad = 0;  // the first <|im_end|> and the first quote or brace at or after the last text start
  bool end_known = false, bad_known = false;
  for (size_t start = jinja.find(kStart); start != std::string::npos; start = jinja.find(kStart, start + 1)) {
    size_t text = start + kStart.size();
    if (jinja.compare(text, 1, "\n") == 0)
      text += 1;
    else if (jinja.compare(text, 2, "\\n") == 0)
      text += 2;
    else
      continue;
    if (!end_known || (end != std::string::npos && end < text)) end = jinja.find(kEnd, text), end_known = true;
    if (!bad_known || (bad != std::string::npos && bad < text))
      bad = jinja.find_first_of("'\"{}", text), bad_known = true;
    if (end == std::string::npos) return "";
    if (bad == std::string::npos || end < bad) return unescape_jinja(jinja.substr(text, end - text));
  }
  return "";
}

}  // namespace

ChatTemplate ChatTemplate::from_jinja(const std::string& jinja, const std::string& origin) {
  const bool chatml = jinja.find("<|im_start|>") != std::string::npos &&
                      jinja.find("<|im_end|>") != std::string::npos &&
                      jinja.find("<|im_start|>assistant") != std::string::npos;
  usage_check(chatml, origin +
                          ": the chat template is not the ChatML form (<|im_start|>role\\ncontent<|im_end|>) that " +
                          "ppo.cpp renders (SmolLM2, Qwen2/2.5/3); render the prompts yourself and set " +
                          "data.apply_chat_template=false");
  const bool qwen_tools = jinja.find("<tool_response>") != std::string::npos;
  return ChatTemplate(default_system_message(jinja), Form::chatml, qwen_tools ? ToolForm::qwen : ToolForm::role);
}

std::string ChatTemplate::render(const json& messages, bool add_generation_prompt) const {
  usage_check(messages.is_array() && !messages.empty(), "a chat prompt must be a non-empty list of messages");
  std::string text;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const bool ok = m.is_object() && m.contains("role") && m.at("role").is_string() && m.contains("content") &&
                    m.at("content").is_string();
    usage_check(ok, "chat message " + std::to_string(i) + " must be {\"role\": string, \"content\": string}, not " +
                        m.dump().substr(0, 120));
    const std::string role = m.at("role").get<std::string>();
    usage_check(is_chat_role(role),
                "chat message " + std::to_string(i) + " has role \"" + role + "\"; " + supported_chat_roles());
    const std::string& content = m.at("content").get_ref<const std::string&>();
    if (form_ == Form::plain) {
      text +=
          static_cast<char>(std::toupper(static_cast<unsigned char>(role[0]))) + role.substr(1) + ": " + content + "\n";
      continue;
    }
    if (i == 0 && role != "system" && !default_system_.empty())
      text += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
    if (role == "tool" && tool_form_ == ToolForm::qwen) {
      const auto is_tool = [&](size_t j) { return messages[j].value("role", "") == "tool"; };
      if (i == 0 || !is_tool(i - 1)) text += "<|im_start|>user";
      text += "\n<tool_response>\n" + content + "\n</tool_response>";
      if (i + 1 == messages.size() || !is_tool(i + 1)) text += "<|im_end|>\n";
      continue;
    }
    text += "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
  }
  if (add_generation_prompt) text += generation_prompt();
  return text;
}

std::string ChatTemplate::tool_turn(const std::string& output, bool eos_closed) const {
  const json tool = json::array({{{"role", "tool"}, {"content", output}}});
  if (form_ == Form::plain) return "\n" + render(tool, true);
  // After the assistant's content the template writes "<|im_end|>\n"; a tool message never gets the default system
  // message here, since it is not the conversation's first.
  return (eos_closed ? "" : "<|im_end|>") + std::string("\n") + ChatTemplate("", form_, tool_form_).render(tool, true);
}

std::string ChatTemplate::generation_prompt() const {
  return form_ == Form::plain ? "Assistant: " : "<|im_start|>assistant\n";
}

}  // namespace ppo
