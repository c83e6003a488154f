// See train/model_reward.h.
#include "train/model_reward.h"

#include <limits>

#include "common/error.h"
#include "train/evaluate.h"
#include "train/experience.h"
#include "train/prompts.h"

namespace ppo {
namespace {

// Whether the policy's prompts are rendered with its tokenizer's own chat template, unchanged.
bool renders_own_template(const Config& config) {
  return config.data.apply_chat_template && config.data.chat_template.empty() && config.data.enable_thinking;
}

// Whether they are rendered plain (a record whose prompt is chat messages still takes a template).
bool renders_plain(const Config& config) {
  return !config.data.apply_chat_template && config.data.chat_template.empty();
}

}  // namespace

ModelReward::ModelReward(const Config& config, const Tokenizer& policy_tokenizer, torch::Device device,
                         int64_t zero_stage)
    : config_(config),
      policy_tokenizer_(policy_tokenizer),
      worker_(config, config.reward_model.model.path, device, zero_stage) {
  reads_policy_ids_ = (renders_plain(config) || renders_own_template(config)) &&
                      worker_.folder().reads_policy_ids(
                          config.model.tokenizer, renders_plain(config) ? nullptr : &policy_tokenizer.chat_template());
  usage_check(reads_policy_ids_ || !config.rollout.multi_turn.enable,
              "rollout.multi_turn.enable=true with reward_model.model.path=" + config.reward_model.model.path +
                  ": a multi-turn trajectory is scored as the policy's ids, which needs the reward model's "
                  "tokenizer.json and chat template to be the policy's (model.tokenizer) with "
                  "data.apply_chat_template=true; they differ");
}

std::string ModelReward::describe() {
  return "reward model: " + config_.reward_model.model.path + " (" + std::to_string(worker_.state().parameter_count()) +
         " parameters), " +
         (reads_policy_ids_ ? "reads the policy's ids (the same tokenizer and chat template)"
                            : "renders each response again with its own tokenizer and chat template");
}

torch::Tensor ModelReward::model_scores(const Batch& batch, const RankPrompts& prompts, int64_t n) {
  const int64_t micro = config_.reward_model.micro_batch_size_per_gpu;
  if (reads_policy_ids_) return worker_.score(batch.at(field::input_ids), batch.at(field::attention_mask), micro);
  std::vector<std::vector<int64_t>> rows;
  for (int64_t b = 0; b < batch.size(); ++b) {
    const TaskSample& sample = prompts.samples[b / n];
    const bool chat = sample.prompt_is_chat || config_.data.apply_chat_template || !config_.data.chat_template.empty();
    const std::string prefix = chat ? sample.response_prefix : "";
    rows.push_back(
        worker_.folder().encode(prompt_messages(sample), prefix + response_text(batch, b, policy_tokenizer_)));
  }
  return torch::tensor(worker_.score_rows(rows, micro), torch::kDouble);
}

torch::Tensor ModelReward::scaled(const torch::Tensor& scores, const torch::Tensor& real, Context& context) {
  const RewardModelConfig& rm = config_.reward_model;
  torch::Tensor out = scores;
  if (rm.normalize) {
    // The batch's moments over every generating rank's real rows, merged into the running ones (TRL's
    // RunningMoments.update), then (score - mean) / (std + eps) as TRL's use_score_norm.
    torch::Tensor sums = torch::stack({real.sum(), (scores * real).sum()}).to(torch::kDouble);
    context.all_reduce(sums);
    const double count = sums[0].item<double>(), mean = count > 0 ? sums[1].item<double>() / count : 0.0;
    torch::Tensor squares = ((scores - mean).square() * real).sum().to(torch::kDouble).reshape({1});
    context.all_reduce(squares);
    moments_.update(static_cast<int64_t>(count), mean, count > 0 ? squares.item<double>() / count : 0.0);
    out = (scores - moments_.mean) / (moments_.std() + std::numeric_limits<float>::epsilon());
  }
  if (rm.clip > 0) out = out.clamp(-rm.clip, rm.clip);
  return out;
}

void ModelReward::apply(Batch& batch, const RankPrompts& prompts, int64_t n, Context& context, Metrics& m) {
  const RewardModelConfig& rm = config_.reward_model;
  const torch::Tensor real = batch.at(field::sample_mask).to(torch::kDouble);
  const torch::Tensor rule = batch.at(field::scores).to(torch::kDouble);
  const torch::Tensor scores = model_scores(batch, prompts, n);
  add_masked_stats(m, "reward/rm", scores, real);
  add_masked_stats(m, "reward/rule", rule, real);
  const torch::Tensor used = scaled(scores, real, context);
  if (rm.normalize || rm.clip > 0) add_masked_stats(m, "reward/rm_scaled", used, real);
  place_scores(batch, (rm.weight * used + rm.rule_weight * rule) * real);
}

}  // namespace ppo
