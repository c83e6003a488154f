// See text/chat_template.h.
#include "text/chat_template.h"

#include <algorithm>
#include <cctype>
#include <ctime>

#include "common/chat_roles.h"
#include "common/error.h"
#include "common/strings.h"

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

void strip_newlines(std::string& text, bool front, bool back) {
  if (back) text.erase(text.find_last_not_of('\n') + 1);  // npos + 1 == 0: all newlines
  if (front) text.erase(0, std::min(text.find_first_not_of('\n'), text.size()));
}

// Python's str.strip(), which Jinja's trim is: the code points str.isspace() holds true for, at both ends.
bool python_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The code point that starts at text[i] and its length in bytes (a stray byte is itself, never a space).
std::pair<uint32_t, size_t> code_point_at(const std::string& text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b = byte(i);
  const size_t length = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
  if (length == 1 || i + length > text.size()) return {b < 0x80 ? b : 0xFFFD, 1};
  uint32_t c = b & (0xFF >> (length + 1));
  for (size_t k = 1; k < length; ++k) c = (c << 6) | (byte(i + k) & 0x3F);
  return {c, length};
}

std::string python_strip(const std::string& text) {
  size_t begin = 0, end = text.size();
  while (begin < end) {
    const auto [c, length] = code_point_at(text, begin);
    if (!python_space(c)) break;
    begin += length;
  }
  while (end > begin) {
    size_t start = end - 1;  // back to the first byte of the last code point
    while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80 && end - start < 4) --start;
    const auto [c, length] = code_point_at(text, start);
    if (start + length != end || !python_space(c)) break;
    end = start;
  }
  return text.substr(begin, end - begin);
}

// transformers' tojson of a string: json.dumps(text, ensure_ascii=False).
std::string json_string(const std::string& text) {
  return json(text).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string llama3_tool_message(const std::string& content) {
  return "<|start_header_id|>ipython<|end_header_id|>\n\n" + json_string(content) + "<|eot_id|>";
}

// strftime_now("%d %b %Y") as transformers' renders it: the local date.
std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[32];
  return std::string(text, std::strftime(text, sizeof text, "%d %b %Y", &local));
}

// Llama 3.1-3.3's template: the date of its system header ("" = today's), or a UsageError for another Llama 3 form.
std::string llama3_date(const std::string& jinja, const std::string& origin) {
  const auto has = [&](const char* text) { return jinja.find(text) != std::string::npos; };
  const bool known = jinja.rfind("{{- bos_token }}", 0) == 0 && has("Cutting Knowledge Date: December 2023\\n") &&
                     has("\"Today Date: \" + date_string + \"\\n\\n\"") &&
                     has("<|start_header_id|>ipython<|end_header_id|>\\n\\n") && has("message['content'] | trim");
  usage_check(known, origin +
                         ": a Llama 3 chat template, but not Llama 3.1-3.3's (a system header with the "
                         "knowledge and today's dates), the Llama form ppo.cpp renders; render the prompts "
                         "yourself and set data.apply_chat_template=false");
  if (has("strftime_now(\"%d %b %Y\")")) return "";
  static const std::string kDefault = "set date_string = \"";
  const size_t at = jinja.find(kDefault);
  const size_t end = at == std::string::npos ? at : jinja.find('"', at + kDefault.size());
  usage_check(end != std::string::npos, origin + ": a Llama 3.1-3.3 chat template without a default date_string");
  return jinja.substr(at + kDefault.size(), end - at - kDefault.size());
}

// A message as render() takes it; a UsageError names its index otherwise.
void check_message(const json& m, size_t i) {
  const bool ok = m.is_object() && m.contains("role") && m.at("role").is_string() && m.contains("content") &&
                  m.at("content").is_string();
  usage_check(ok, "chat message " + std::to_string(i) + " must be {\"role\": string, \"content\": string}, not " +
                      m.dump().substr(0, 120));
  const std::string role = m.at("role").get<std::string>();
  usage_check(is_chat_role(role),
              "chat message " + std::to_string(i) + " has role \"" + role + "\"; " + supported_chat_roles());
  const auto reasoning = m.find("reasoning_content");
  usage_check(reasoning == m.end() || reasoning->is_string() || reasoning->is_null(),
              "chat message " + std::to_string(i) + ": reasoning_content must be a string or null");
}

}  // namespace

ChatTemplate ChatTemplate::from_jinja(const std::string& jinja, const std::string& origin) {
  const auto has = [&](const char* text) { return jinja.find(text) != std::string::npos; };
  if (has("<|start_header_id|>") && has("<|end_header_id|>") && has("<|eot_id|>")) {
    ChatTemplate llama("", Form::llama3, ToolForm::ipython);
    llama.date_ = llama3_date(jinja, origin);
    return llama;
  }
  const bool chatml = jinja.find("<|im_start|>") != std::string::npos &&
                      jinja.find("<|im_end|>") != std::string::npos &&
                      jinja.find("<|im_start|>assistant") != std::string::npos;
  usage_check(chatml, origin +
                          ": the chat template is neither the ChatML form (<|im_start|>role\\ncontent<|im_end|>: " +
                          "SmolLM2, Qwen2/2.5/3) nor Llama 3.1-3.3's, the forms ppo.cpp renders; render the prompts " +
                          "yourself and set data.apply_chat_template=false");
  // The ChatML form writes no BOS or EOS of the tokenizer's own (LFM2's and Hermes' templates open with bos_token): a
  // template that does is another form.
  usage_check(!has("bos_token") && !has("eos_token"),
              origin + ": the chat template writes the tokenizer's bos_token or eos_token, which the ChatML form " +
                  "ppo.cpp renders does not; render the prompts yourself and set data.apply_chat_template=false");
  // Qwen3's reasoning rules come with its switch and its bookkeeping of the last user query; another template that
  // writes <think> has rules of its own that a ChatML rendering would silently drop.
  // Qwen3.5's opens a block in every generation prompt ('<think>\n' alone): not Qwen3's form.
  const bool qwen3 = has("enable_thinking") && has("reasoning_content") && has("last_query_index") &&
                     has("'<think>\\n\\n</think>\\n\\n'") && !has("'<think>\\n'");
  usage_check(qwen3 || (!has("<think>") && !has("</think>")),
              origin +
                  ": the chat template writes <think> reasoning blocks, but not as Qwen3's does (enable_thinking, " +
                  "reasoning_content, the last user query), the one reasoning form ppo.cpp renders; render the " +
                  "prompts yourself and set data.apply_chat_template=false");
  return ChatTemplate(default_system_message(jinja), Form::chatml,
                      has("'\\n<tool_response>\\n'") && has("'\\n</tool_response>'") ? ToolForm::qwen
                      : has("tool")                                                  ? ToolForm::unknown
                                                                                     : ToolForm::role,
                      qwen3 ? ThinkForm::qwen3 : ThinkForm::none);
}

ChatTemplate ChatTemplate::with_thinking(bool enable, const std::string& key) const {
  usage_check(enable || think_form_ == ThinkForm::qwen3,
              key + "=false, but the chat template has no enable_thinking switch (Qwen3's has one); remove the key " +
                  "or choose a template that has it (data.chat_template)");
  ChatTemplate out = *this;
  out.thinking_ = enable;
  return out;
}

std::string ChatTemplate::render_assistant(const json& message, bool keep_reasoning, bool last) const {
  std::string content = message.at("content").get<std::string>();
  if (think_form_ == ThinkForm::none) return "<|im_start|>assistant\n" + content + "<|im_end|>\n";
  // As Qwen3's template: reasoning_content when given, else the text between "<think>" and the first "</think>"; the
  // answer is what follows the last "</think>".
  std::string reasoning;
  const auto given = message.find("reasoning_content");
  static const std::string kOpen = "<think>", kClose = "</think>";
  if (given != message.end() && given->is_string()) {
    reasoning = given->get<std::string>();
  } else if (const size_t close = content.find(kClose); close != std::string::npos) {
    reasoning = content.substr(0, close);
    strip_newlines(reasoning, false, true);
    if (const size_t open = reasoning.rfind(kOpen); open != std::string::npos) reasoning.erase(0, open + kOpen.size());
    strip_newlines(reasoning, true, false);
    content.erase(0, content.rfind(kClose) + kClose.size());
    strip_newlines(content, true, false);
  }
  if (!keep_reasoning || (!last && reasoning.empty())) return "<|im_start|>assistant\n" + content + "<|im_end|>\n";
  strip_newlines(reasoning, true, true);
  strip_newlines(content, true, false);
  return "<|im_start|>assistant\n<think>\n" + reasoning + "\n</think>\n\n" + content + "<|im_end|>\n";
}

std::string ChatTemplate::render_llama3(const json& messages) const {
  const auto content_of = [&](size_t j) { return messages[j].at("content").get<std::string>(); };
  const bool system_first = messages[0].at("role") == "system";
  std::string text =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
      "December 2023\nToday Date: " +
      (date_.empty() ? today() : date_) + "\n\n" + (system_first ? python_strip(content_of(0)) : "") + "<|eot_id|>";
  for (size_t i = system_first ? 1 : 0; i < messages.size(); ++i) {
    const std::string role = messages[i].at("role").get<std::string>();
    text += role == "tool"
                ? llama3_tool_message(content_of(i))
                : "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + python_strip(content_of(i)) + "<|eot_id|>";
  }
  return text;
}

std::string ChatTemplate::render(const json& messages, bool add_generation_prompt) const {
  usage_check(messages.is_array() && !messages.empty(), "a chat prompt must be a non-empty list of messages");
  for (size_t i = 0; i < messages.size(); ++i) check_message(messages[i], i);
  if (form_ == Form::llama3) return render_llama3(messages) + (add_generation_prompt ? generation_prompt() : "");
  const auto role_of = [&](size_t j) { return messages[j].at("role").get<std::string>(); };
  // Qwen3 keeps the reasoning of assistant messages after the last user query (none: the last message's index).
  size_t last_query = messages.size() - 1;
  for (size_t j = messages.size(); j-- > 0;) {
    const std::string& content = messages[j].at("content").get_ref<const std::string&>();
    if (role_of(j) == "user" && !(starts_with(content, "<tool_response>") && ends_with(content, "</tool_response>"))) {
      last_query = j;
      break;
    }
  }
  std::string text;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string role = role_of(i);
    const std::string& content = messages[i].at("content").get_ref<const std::string&>();
    if (form_ == Form::plain) {
      text +=
          static_cast<char>(std::toupper(static_cast<unsigned char>(role[0]))) + role.substr(1) + ": " + content + "\n";
      continue;
    }
    if (i == 0 && role != "system" && !default_system_.empty())
      text += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
    usage_check(role != "tool" || tool_form_ != ToolForm::unknown,
                "chat message " + std::to_string(i) +
                    " is a tool message, and the chat template writes tool messages in a form other than Qwen's "
                    "<tool_response> blocks or a plain <|im_start|>tool message, which ppo.cpp does not render");
    if (role == "tool" && tool_form_ == ToolForm::qwen) {
      if (i == 0 || role_of(i - 1) != "tool") text += "<|im_start|>user";
      text += "\n<tool_response>\n" + content + "\n</tool_response>";
      if (i + 1 == messages.size() || role_of(i + 1) != "tool") text += "<|im_end|>\n";
      continue;
    }
    if (role == "assistant") {
      text += render_assistant(messages[i], i > last_query, i + 1 == messages.size());
      continue;
    }
    text += "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
  }
  if (add_generation_prompt) text += generation_prompt();
  return text;
}

std::string ChatTemplate::tool_turn(const std::string& output, bool eos_closed) const {
  if (form_ == Form::llama3)
    return (eos_closed ? "" : "<|eot_id|>") + llama3_tool_message(output) + generation_prompt();
  const json tool = json::array({{{"role", "tool"}, {"content", output}}});
  if (form_ == Form::plain) return "\n" + render(tool, true);
  // After the assistant's content the template writes "<|im_end|>\n"; a tool message never gets the default system
  // message here, since it is not the conversation's first.
  ChatTemplate later = *this;
  later.default_system_.clear();
  return (eos_closed ? "" : "<|im_end|>") + std::string("\n") + later.render(tool, true);
}

std::string ChatTemplate::end_of_message() const {
  return form_ == Form::plain ? "" : form_ == Form::llama3 ? "<|eot_id|>" : "<|im_end|>";
}

std::string ChatTemplate::generation_prompt() const {
  if (form_ == Form::plain) return "Assistant: ";
  if (form_ == Form::llama3) return "<|start_header_id|>assistant<|end_header_id|>\n\n";
  const bool empty_block = think_form_ == ThinkForm::qwen3 && !thinking_;
  return empty_block ? "<|im_start|>assistant\n<think>\n\n</think>\n\n" : "<|im_start|>assistant\n";
}

}  // namespace ppo
