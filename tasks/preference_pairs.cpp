// See tasks/preference_pairs.h.
#include "tasks/preference_pairs.h"

#include <cmath>

#include "common/error.h"
#include "common/jsonl.h"
#include "tasks/parquet.h"
#include "tasks/verl_record.h"

namespace ppo {
namespace {

// A response field: its text (a string, or the content of its last message, an assistant's) and the messages before
// that one (none for a string).
struct Response {
  std::string text;
  nlohmann::json before = nlohmann::json::array();
};

Response read_response(const nlohmann::json& record, const std::string& key, const std::string& config_key) {
  TaskSample field;
  read_prompt(record, key, field, config_key);
  Response r;
  if (!field.prompt_is_chat) {
    r.text = field.prompt;
  } else {
    const nlohmann::json& last = field.messages.back();
    usage_check(last["role"] == "assistant", "field '" + key + "': the last message is a " +
                                                 last["role"].get<std::string>() +
                                                 " message; a response ends in the assistant's");
    r.text = last["content"].get<std::string>();
    r.before = nlohmann::json(field.messages.begin(), field.messages.end() - 1);
  }
  usage_check(!r.text.empty(), "field '" + key + "': the response is empty");
  return r;
}

PreferencePair read_pair(const nlohmann::json& record, const PairKeys& keys) {
  usage_check(record.is_object(),
              "expected a JSON object with the fields '" + keys.chosen + "' and '" + keys.rejected + "'");
  const Response chosen = read_response(record, keys.chosen, "data.chosen_key");
  const Response rejected = read_response(record, keys.rejected, "data.rejected_key");
  PreferencePair pair;
  pair.chosen = chosen.text;
  pair.rejected = rejected.text;
  usage_check(pair.chosen != pair.rejected,
              "field '" + keys.rejected + "': the same response as '" + keys.chosen + "'; a pair prefers one of two");
  const auto prompt = record.find(keys.prompt);
  if (prompt != record.end() && !prompt->is_null()) {
    read_prompt(record, keys.prompt, pair.prompt);
    usage_check(pair.prompt.prompt_is_chat || !pair.prompt.prompt.empty(),
                "field '" + keys.prompt + "': the prompt is empty");
    for (const auto& [key, r] : {std::pair{keys.chosen, &chosen}, std::pair{keys.rejected, &rejected}})
      usage_check(r->before.empty(), "field '" + key + "': with a '" + keys.prompt +
                                         "' field, a response in messages is the assistant's message alone");
  } else {
    usage_check(!chosen.before.empty() && !rejected.before.empty(),
                "missing field '" + keys.prompt +
                    "' (data.prompt_key): a pair needs its prompt, as a field or as the "
                    "messages before the responses");
    usage_check(chosen.before == rejected.before, "fields '" + keys.chosen + "' and '" + keys.rejected +
                                                      "': their messages before the response differ; the two "
                                                      "responses of a pair answer the same prompt");
    pair.prompt.messages = chosen.before;
    pair.prompt.prompt_is_chat = true;
  }
  const auto margin = record.find(keys.margin);
  if (margin != record.end() && !margin->is_null()) {
    usage_check(
        margin->is_number() && std::isfinite(margin->get<double>()),
        "field '" + keys.margin + "': expected a finite number (data.margin_key), got " + margin->dump().substr(0, 60));
    pair.margin = margin->get<double>();
  }
  return pair;
}

}  // namespace

std::vector<PreferencePair> load_preference_pairs(const std::string& path, const PairKeys& keys) {
  std::vector<PreferencePair> pairs;
  const bool parquet = is_parquet_path(path);
  auto on_record = [&](const nlohmann::json& record, int64_t position) {
    PreferencePair pair = read_pair(record, keys);
    pair.prompt.index = static_cast<int64_t>(pairs.size());
    pair.prompt.data_source = "pairs";
    pair.prompt.origin = path + (parquet ? ": row " : ":") + std::to_string(position);
    pairs.push_back(std::move(pair));
  };
  if (parquet)
    for_each_parquet_record(path, on_record);
  else
    for_each_jsonl_record(path, on_record);
  usage_check(!pairs.empty(), path + ": no preference pairs");
  return pairs;
}

}  // namespace ppo
