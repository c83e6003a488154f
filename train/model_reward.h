// The reward model in a PPO step (reward_model.*): each response of a generation batch scored by the reward model
// (workers/reward_worker.h) on the ranks that generate, its score normalised and clipped, and combined with the rule
// reward that compute_rewards set (train/experience.h).
//
// The reward model reads its own tokens. When its tokenizer.json and chat template are the policy's, byte for byte,
// and the policy's prompts are rendered with that template (data.apply_chat_template, no data.chat_template, thinking
// on), it scores the policy's ids as they are; otherwise each (prompt, response) is decoded and rendered again with
// its chat template, as veRL's reward-model worker switches templates: the prompt's messages, then the response (after
// the sample's response_prefix, where the policy's prompt ends in it) as the assistant's message.
#pragma once

#include <memory>
#include <string>

#include "common/batch.h"
#include "common/config.h"
#include "common/running_moments.h"
#include "parallel/context.h"
#include "rl/metrics.h"
#include "text/tokenizer.h"
#include "train/prompts.h"
#include "workers/reward_worker.h"

namespace ppo {

class ModelReward {
 public:
  // Reads reward_model.model.path for `policy_tokenizer`'s prompts; `zero_stage` 3 shards it over the ranks of the
  // current scope (collective). A multi-turn rollout (rollout.multi_turn.enable) needs a reward model that reads the
  // policy's ids: a UsageError otherwise.
  ModelReward(const Config& config, const Tokenizer& policy_tokenizer, torch::Device device, int64_t zero_stage);

  // Scores the batch's rows (n responses per prompt of `prompts`) and sets the fields scores and token_scores to
  // reward_model.weight x the score (normalised by the running moments, updated with this batch's real rows first,
  // then clipped) + reward_model.rule_weight x the rule's score (the scores field as it comes). Metrics
  // reward/rm/{mean,max,min} (the model's scores), reward/rm_scaled/... (normalised and clipped, with either on),
  // reward/rule/{mean,max,min}. Collective over the ranks that generate.
  void apply(Batch& batch, const RankPrompts& prompts, int64_t n, Context& context, Metrics& m);

  bool reads_policy_ids() const { return reads_policy_ids_; }
  // One line for the start of a run: the folder, its parameters, and how it reads the responses.
  std::string describe();
  const RunningMoments& moments() const { return moments_; }
  void set_moments(const RunningMoments& moments) { moments_ = moments; }

 private:
  // The reward model's scores [B] (float64) of the batch's rows; padding copies are scored like the others.
  torch::Tensor model_scores(const Batch& batch, const RankPrompts& prompts, int64_t n);
  // The scores normalised (reward_model.normalize, after merging the real rows' moments over the ranks) and clipped.
  torch::Tensor scaled(const torch::Tensor& scores, const torch::Tensor& real, Context& context);

  const Config& config_;
  const Tokenizer& policy_tokenizer_;
  RewardWorker worker_;
  bool reads_policy_ids_ = false;
  RunningMoments moments_;
};

}  // namespace ppo
