// Preference pairs, what `ppo rm` trains a reward model on: one record per JSONL line or Parquet row, in TRL's and
// OpenRLHF's layouts (the key names are data.prompt_key, data.chosen_key, data.rejected_key, data.margin_key):
//   {"prompt": "...", "chosen": "...", "rejected": "..."}                          strings (OpenRLHF, TRL standard)
//   {"prompt": [messages], "chosen": [{"role": "assistant", ...}], "rejected": [...]}   TRL conversational, explicit
//   {"chosen": [messages..., assistant], "rejected": [messages..., assistant]}           TRL conversational, implicit
// with an optional number "margin" (TRL's). In the implicit layout the messages before the last are the prompt, and
// must be the same in both. The prompt is rendered as PPO's prompts are (train/prompts.h), so a reward model trained
// on pairs reads what it later scores.
#pragma once

#include <string>
#include <vector>

#include "tasks/task.h"

namespace ppo {

struct PreferencePair {
  TaskSample prompt;             // the prompt: text, or chat messages (prompt_is_chat); origin "file:line"
  std::string chosen, rejected;  // the preferred and the other response
  double margin = 0;             // the record's margin, 0 without one
};

struct PairKeys {
  std::string prompt = "prompt", chosen = "chosen", rejected = "rejected", margin = "margin";
};

// The pairs of a JSONL or Parquet file, in order. A record without a prompt, or with a missing, empty or mistyped
// response, chosen and rejected the same, implicit prompts that differ, or a margin that is not a finite number, is a
// UsageError naming the file, the line (or row) and the field.
std::vector<PreferencePair> load_preference_pairs(const std::string& path, const PairKeys& keys);

}  // namespace ppo
