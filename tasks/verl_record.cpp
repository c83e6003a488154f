// See tasks/verl_record.h.
#include "tasks/verl_record.h"

#include "common/chat_roles.h"
#include "common/error.h"
#include "common/strings.h"

namespace ppo {

bool is_verl_record(const nlohmann::json& record) {
  return record.is_object() && record.contains("reward_model");
}

void read_prompt(const nlohmann::json& record, const std::string& key, TaskSample& s, const std::string& config_key) {
  auto it = record.find(key);
  usage_check(it != record.end() && !it->is_null(), "missing field '" + key + "' (" + config_key + ")");
  if (it->is_string()) {
    s.prompt = it->get<std::string>();
    return;
  }
  const std::string expected =
      "field '" + key + "': expected a string or a non-empty list of {\"role\": ..., \"content\": ...} messages";
  usage_check(it->is_array() && !it->empty(), expected);
  for (const nlohmann::json& m : *it)
    if (!(m.is_object() && m.contains("role") && m["role"].is_string() && m.contains("content") &&
          m["content"].is_string()))
      throw UsageError(expected + ", got " + m.dump().substr(0, 120));
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string role = (*it)[i]["role"].get<std::string>();
    usage_check(is_chat_role(role), "field '" + key + "': message " + std::to_string(i) + " has role \"" +
                                        role.substr(0, 40) + "\"; " + supported_chat_roles());
  }
  s.messages = *it;
  s.prompt_is_chat = true;
}

TaskSample verl_sample(const nlohmann::json& record, const std::string& prompt_key) {
  TaskSample s;
  read_prompt(record, prompt_key, s);
  const nlohmann::json& reward_model = record["reward_model"];
  usage_check(reward_model.is_object() && reward_model.contains("ground_truth"),
              "field 'reward_model.ground_truth': missing (veRL records carry the reference the reward compares with "
              "there)");
  s.ground_truth = reward_model["ground_truth"];
  usage_check(!s.ground_truth.is_null(), "field 'reward_model.ground_truth': is null");
  if (record.contains("data_source")) {
    usage_check(record["data_source"].is_string() && !record["data_source"].get<std::string>().empty(),
                "field 'data_source': expected a non-empty string");
    s.data_source = record["data_source"].get<std::string>();
    // It names metrics (val/<data_source>/...) and is printed: no escape sequence, newline or NUL may pass.
    usage_check(!has_control_character(s.data_source),
                "field 'data_source': " +
                    nlohmann::json(s.data_source)
                        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                        .substr(0, 200) +
                    " holds a control character; it names metrics and is printed");
  }
  s.extra_info = record.contains("extra_info") ? record["extra_info"] : nlohmann::json();
  usage_check(s.extra_info.is_null() || s.extra_info.is_object(), "field 'extra_info': expected an object");
  s.index = -1;
  if (s.extra_info.is_object()) {
    const nlohmann::json& e = s.extra_info;
    try {
      // null is absent: a Parquet struct holds every field of every row, null where a row had none.
      if (e.contains("index") && !e["index"].is_null()) s.index = json_field<int64_t>(e, "index");
      if (e.contains("difficulty") && !e["difficulty"].is_null()) s.difficulty = json_field<int64_t>(e, "difficulty");
    } catch (const UsageError& error) {
      throw UsageError(std::string("extra_info: ") + error.what());
    }
    if (e.contains("answer") && e["answer"].is_string()) s.answer = e["answer"].get<std::string>();
  }
  return s;
}

}  // namespace ppo
