// ppo sft: supervised warm-start on a task's reference answers.
#pragma once

#include <cstdint>

#include "common/batch.h"
#include "common/config.h"
#include "model/tokenizer.h"
#include "train/prompts.h"

namespace ppo {

// prompt + reference answer + EOS in the rollout layout (left-padded prompt, right-padded response of width R), for
// the cross-entropy on the response tokens. UsageError when an answer does not fit in R tokens.
Batch sft_batch(const RankPrompts& prompts, const Tokenizer& tokenizer, int64_t R);

// rollout.n=1, no critic; the step schedule, validation and checkpoints of training. Returns the exit status.
int run_sft(Config& config);

}  // namespace ppo
