// veRL's dataset layout (verl/utils/dataset/rl_dataset.py, examples/data_preprocess/gsm8k.py), one JSON record per
// JSONL line:
//   {"data_source": "openai/gsm8k",
//    "prompt": [{"role": "user", "content": "..."}]        (or a plain string; the key is data.prompt_key),
//    "ability": "math",                                     (ignored)
//    "reward_model": {"style": "rule", "ground_truth": "72"},   (ground_truth: a string or any JSON value)
//    "extra_info": {"split": "train", "index": 0, "answer": "...", ...}}
// data_source picks the reward function (tasks/reward.h) and names the metrics; extra_info is passed to the reward.
// From extra_info, ppo.cpp also reads "index" (the sample's index), "answer" (the SFT target, as veRL's GSM8K
// preprocessing stores the worked solution there) and "difficulty" (an integer, for the tables by difficulty).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "tasks/task.h"

namespace ppo {

// A record in veRL's layout: a JSON object with a "reward_model" field.
bool is_verl_record(const nlohmann::json& record);

// Field `key` of `record` as a prompt: a string into s.prompt, or chat messages [{"role": ..., "content": ...}, ...]
// (string roles among the supported ones, string contents) into s.messages with s.prompt_is_chat. UsageError naming
// the field (and `config_key`, the key naming it, when it is missing or null).
void read_prompt(const nlohmann::json& record, const std::string& key, TaskSample& s,
                 const std::string& config_key = "data.prompt_key");

// The sample of a veRL record; UsageError naming the field ("field 'reward_model.ground_truth': missing", "field
// 'prompt': expected a string or a list of {role, content} messages", ...). index is -1 when extra_info has none.
TaskSample verl_sample(const nlohmann::json& record, const std::string& prompt_key);

}  // namespace ppo
