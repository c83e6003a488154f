// See train/step_generator.h.
#include "train/step_generator.h"

#include <iostream>
#include <stdexcept>
#include <tuple>

#include "rl/algorithms.h"
#include "train/evaluate.h"
#include "train/experience.h"
#include "train/phase_timer.h"

namespace ppo {

StepGenerator::StepGenerator(Run& run)
    : config_(run.config()),
      context_(run.context()),
      in_(run.inputs()),
      train_sources_(data_sources(in_.train_set, *in_.rewarder)),
      shape_(run.shape()),
      stages_(curriculum_stages(config_, shape_, in_.train_set, in_.train_file_sizes)) {
  if (config_.reward_model.enable && context_.role() != Role::trainer)
    model_reward_ =
        std::make_unique<ModelReward>(config_, *in_.tokenizer, context_.device(),
                                      context_.role() == Role::colocated ? config_.parallel.zero_stage : int64_t{0});
  if (model_reward_ && context_.rank() == 0) std::cout << model_reward_->describe() << "\n";
}

void StepGenerator::set_reward_moments(const RunningMoments& moments) {
  if (model_reward_) model_reward_->set_moments(moments);
  moments_ = moments;
}

Batch StepGenerator::generate(Actor& policy, int64_t step, Metrics& m) {
  return config_.algorithm.filter_groups.enable ? sample_with_signal(policy, step, m)
                                                : generate_scored(policy, step, gen_batches_++, m).batch;
}

StepGenerator::Scored StepGenerator::generate_scored(Actor& policy, int64_t step, int64_t index, Metrics& m) {
  const RolloutConfig& r = config_.rollout;
  const torch::Device device = context_.device();
  const CurriculumStage& stage = stages_[curriculum_stage_of(config_, static_cast<int64_t>(stages_.size()), step)];
  const RankPrompts prompts = stage_prompts(stage, index, in_.train_set, *in_.tokenizer, config_, context_);
  Scored out;
  {
    PhaseTimer t(m, "gen", device);
    WorkerState::Phase phase(policy.state(), /*whole_model=*/true);
    // The seeds mix in the generation batch's index, the 0-based step index when every step takes one batch, as
    // they always have: runs reproduce those of earlier versions.
    out.batch = rollout_batch(policy.model(), *in_.tokenizer, prompts, {r.n, r.temperature, r.top_k, r.top_p, index},
                              config_, {false, {}, in_.environment.get()});
  }
  {
    PhaseTimer t(m, "reward", device);
    add_reward_metrics(m, "reward/", compute_rewards(out.batch, prompts, r.n, *in_.rewarder, *in_.tokenizer),
                       train_sources_, context_);
  }
  if (model_reward_) {
    PhaseTimer t(m, "reward_model", device);
    model_reward_->apply(out.batch, prompts, r.n, context_, m);
  }
  const std::string& metric = config_.algorithm.filter_groups.metric;
  if (metric == "acc") out.filter_values = out.batch.at(field::correct);
  if (metric == "score") out.filter_values = out.batch.at(field::scores);  // before the overlong punishment
  if (config_.reward.overlong_buffer.enable) punish_overlong(out.batch, m);
  if (metric == "seq_reward") out.filter_values = out.batch.at(field::scores);
  return out;
}

Batch StepGenerator::sample_with_signal(Actor& policy, int64_t step, Metrics& m) {
  const FilterGroupsConfig& fg = config_.algorithm.filter_groups;
  const int64_t n = config_.rollout.n, wanted = config_.data.train_batch_size;
  std::vector<Batch> kept;
  int64_t kept_groups = 0, generated_groups = 0, batches = 0;
  while (kept_groups < wanted) {
    if (batches == fg.max_num_gen_batches)
      throw std::runtime_error(
          "algorithm.filter_groups: " + std::to_string(batches) + " generation batches (max_num_gen_batches) gave " +
          std::to_string(kept_groups) + " of the " + std::to_string(wanted) +
          " prompt groups whose responses differ in " + fg.metric + " (of " + std::to_string(generated_groups) +
          " generated): the prompts are too easy or too hard for the policy; raise max_num_gen_batches or rollout.n, "
          "or change the data (metrics up to the previous step are in the run directory)");
    Scored scored = generate_scored(policy, step, gen_batches_++, m);
    ++batches;
    // Every rank gathers every rank's rows, so that all keep the same groups in the same order.
    Batch all;
    for (const auto& [name, t] : scored.batch.fields) all.fields[name] = context_.all_gather(t);
    const torch::Tensor signal = groups_with_signal(context_.all_gather(scored.filter_values), all.at(field::group_id));
    const torch::Tensor real = all.at(field::group_id) >= 0;
    generated_groups += real.sum().item<int64_t>() / n;
    // Kept rows in the order of their prompts' positions (the rows of a rank are a chunk of each dispatch block).
    const torch::Tensor kept_rows = signal.nonzero().view(-1);
    const torch::Tensor positions = all.at(field::prompt_index).index_select(0, kept_rows);
    const torch::Tensor order = std::get<1>(positions.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
    const torch::Tensor rows = kept_rows.index_select(0, order);
    kept_groups += rows.size(0) / n;
    kept.push_back(all.select(rows));
  }
  // veRL's train/num_gen_batches; the groups without signal and those over the batch (veRL's evicted and
  // discarded-surplus counts, in groups); the share of generated groups with signal.
  m.set("train/num_gen_batches", static_cast<double>(batches));
  m.set("training/filter_groups/evicted_groups", static_cast<double>(generated_groups - kept_groups));
  m.set("training/filter_groups/discarded_surplus_groups", static_cast<double>(kept_groups - wanted));
  m.set("training/filter_groups/kept_fraction",
        static_cast<double>(kept_groups) / static_cast<double>(generated_groups));
  std::vector<int64_t> group_rows;
  for (int64_t g = 0; g < wanted; ++g) group_rows.push_back(g * n);
  const Dealing deal = generation_dealing(config_, shape_.dispatch_block, context_, wanted);
  return dispatch_groups(concat_generations(kept, in_.tokenizer->pad_id()), group_rows, n, deal.block,
                         context_.world_size(), context_.rank(), deal.pad_to_world);
}

void StepGenerator::punish_overlong(Batch& batch, Metrics& m) {
  const OverlongBufferConfig& ob = config_.reward.overlong_buffer;
  const torch::Tensor& mask = batch.at(field::response_mask);
  const torch::Tensor real = batch.at(field::sample_mask);
  const int64_t R = mask.size(1);
  const torch::Tensor& attention = batch.at(field::attention_mask);
  const torch::Tensor lengths = attention.narrow(1, -R, R).sum(1).to(torch::kFloat);  // [B] tool messages included
  const torch::Tensor penalty =
      overlong_penalty(lengths, config_.data.max_response_length, ob.len, ob.penalty_factor) * real;  // [B]
  batch.set(field::scores, batch.at(field::scores) + penalty);
  // The score sits on the last response token; a row without one (a padding copy) has nothing to move.
  torch::Tensor last = (lengths.to(torch::kLong) - 1).clamp_min(0).unsqueeze(1);  // [B, 1]
  batch.set(field::token_scores, batch.at(field::token_scores).scatter_add(1, last, penalty.unsqueeze(1)));
  // veRL's DAPO reward manager logs overlong_reward and overlong (penalty < 0) per response.
  const double n = real.sum().item<double>();
  m.add_mean("reward/overlong_reward/mean", penalty.sum().item<double>(), n);
  m.add_mean("reward/overlong/mean", ((penalty < 0).to(torch::kFloat32) * real).sum().item<double>(), n);
}

}  // namespace ppo
