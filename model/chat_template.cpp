// See model/chat_template.h.
#include "model/chat_template.h"

#include <cctype>

#include <regex>

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

}  // namespace

ChatTemplate ChatTemplate::from_jinja(const std::string& jinja, const std::string& origin) {
  const bool chatml = jinja.find("<|im_start|>") != std::string::npos &&
                      jinja.find("<|im_end|>") != std::string::npos &&
                      jinja.find("<|im_start|>assistant") != std::string::npos;
  usage_check(chatml, origin +
                          ": the chat template is not the ChatML form (<|im_start|>role\\ncontent<|im_end|>) that " +
                          "ppo.cpp renders (SmolLM2, Qwen2/2.5/3); render the prompts yourself and set " +
                          "data.apply_chat_template=false");
  // The default system message: a literal "<|im_start|>system\n...<|im_end|>" inside one string literal (the
  // newline written as is or as \n). Templates that take the system text from the messages only have none.
  static const std::regex kDefaultSystem(R"(<\|im_start\|>system(?:\n|\\n)([^'"{}]*?)<\|im_end\|>)");
  std::smatch m;
  return ChatTemplate(std::regex_search(jinja, m, kDefaultSystem) ? unescape_jinja(m[1].str()) : "");
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
    usage_check(role == "system" || role == "user" || role == "assistant",
                "chat message " + std::to_string(i) + " has role \"" + role + "\"; supported: system, user, assistant");
    const std::string& content = m.at("content").get_ref<const std::string&>();
    if (form_ == Form::plain) {
      text +=
          static_cast<char>(std::toupper(static_cast<unsigned char>(role[0]))) + role.substr(1) + ": " + content + "\n";
      continue;
    }
    if (i == 0 && role != "system" && !default_system_.empty())
      text += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
    text += "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
  }
  if (add_generation_prompt) text += form_ == Form::plain ? "Assistant: " : "<|im_start|>assistant\n";
  return text;
}

}  // namespace ppo
