// ppo sft: supervised warm-start on a task's reference answers.
#pragma once

#include <cstdint>

#include "common/batch.h"
#include "common/config.h"
#include "text/tokenizer.h"
#include "train/prompts.h"
#include "train/run.h"
#include "workers/actor.h"

namespace ppo {

// prompt + reference answer + EOS in the rollout layout (left-padded prompt, right-padded response of width R), for
// the cross-entropy on the response tokens. UsageError when an answer does not fit in R tokens.
Batch sft_batch(const RankPrompts& prompts, const Tokenizer& tokenizer, int64_t R);

// SFT's step, plugged into a Run (train/run.h): the cross-entropy of each step's prompts' reference answers, one
// answer per prompt (rollout.n counts as 1), no critic. The Run gives it resume, validation, logging, checkpoints and
// the skipped-step stop, as PPO's step.
class SftSteps : public WorkerSteps<Actor> {
 public:
  explicit SftSteps(Run& run);  // every training prompt must have an answer
  std::string kind() const override { return "sft"; }
  std::map<std::string, double> step(int64_t step) override;
  ValMetrics validate(int64_t step) override;
  std::string progress(const std::map<std::string, double>& metrics) const override;
  void summarize() override;  // the checkpoint a PPO run starts from

 private:
  Run& run_;
  const Config& config_;
  Context& context_;
  RunInputs& in_;
};

// ppo sft: checks the config for SFT, then trains. Returns the exit status.
int run_sft(const Config& config);

}  // namespace ppo
