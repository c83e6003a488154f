// The PPO step loop; see train/trainer.h.
#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <tuple>

#include "common/error.h"
#include "parallel/balance.h"
#include "records/plot.h"
#include "records/trainer_state.h"
#include "rl/algorithms.h"
#include "rollout/rollout.h"
#include "train/config_check.h"
#include "train/evaluate.h"
#include "train/experience.h"

namespace ppo {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The folder to give `tensorboard --logdir` so that the run shows under its own name: the run directory's parent.
std::string logdir_of(const std::string& run_dir) {
  const std::filesystem::path parent = std::filesystem::path(run_dir).lexically_normal().parent_path();
  return parent.empty() ? "." : parent.string();
}

// verl's named phase timer: records timing_s/<name> when it goes out of scope, and the phase's memory on the compute
// device (workers/memory.h): memory/<name>_peak_mib, the most held by live tensors during the phase, all state
// included, and memory/<name>_added_mib, that peak above what was held when the phase began (activations, gradients,
// temporaries). Both are maxima over ranks.
class PhaseTimer {
 public:
  PhaseTimer(Metrics& metrics, std::string name, torch::Device device)
      : metrics_(metrics), name_(std::move(name)), device_(device), start_(Clock::now()) {
    reset_memory_peak(device_);
    start_bytes_ = memory_stats(device_).current_bytes;
    start_sent_ = Context::get().bytes_sent();
  }
  ~PhaseTimer() {
    metrics_.add_value("timing_s/" + name_, seconds_since(start_));
    if (Context::get().world_size() > 1)
      metrics_.add_max("comm/" + name_ + "_sent_mib", (Context::get().bytes_sent() - start_sent_) / (1 << 20));
    const double peak = static_cast<double>(memory_stats(device_).peak_bytes), mib = 1 << 20;
    metrics_.add_max("memory/" + name_ + "_peak_mib", peak / mib);
    metrics_.add_max("memory/" + name_ + "_added_mib", (peak - static_cast<double>(start_bytes_)) / mib);
  }

 private:
  Metrics& metrics_;
  std::string name_;
  torch::Device device_;
  Clock::time_point start_;
  int64_t start_bytes_ = 0;
  double start_sent_ = 0;
};

// The step's data metrics (veRL's compute_data_metrics): scores, rewards, advantages, returns, values and the
// critic's explained variance, response and prompt lengths, tokens; all over the global batch.
void add_data_metrics(const Batch& batch, Context& context, Metrics& m) {
  const torch::Tensor& real = batch.at(field::sample_mask);
  const torch::Tensor& mask = batch.at(field::response_mask);
  add_masked_stats(m, "critic/score", batch.at(field::scores), real);
  add_masked_stats(m, "critic/rewards", (batch.at(field::token_rewards) * mask).sum(1), real);
  const torch::Tensor judged = real * batch.at(field::has_correct);  // rows whose reward says what correct is
  m.add_mean("critic/acc/mean", (batch.at(field::correct) * judged).sum().item<double>(), judged.sum().item<double>());
  m.add_mean("critic/format_ok/mean", (batch.at(field::format_ok) * real).sum().item<double>(),
             real.sum().item<double>());
  add_masked_stats(m, "critic/advantages", batch.at(field::advantages), mask);
  add_masked_stats(m, "critic/returns", batch.at(field::returns), mask);
  if (batch.has(field::values)) {
    add_masked_stats(m, "critic/values", batch.at(field::values), mask);
    m.set("critic/vf_explained_var",
          explained_var(batch.at(field::values), batch.at(field::returns), mask, rank_sum_reducer(context)));
  }
  // Lengths from the attention mask: the response mask may have left truncated responses out of the losses.
  const int64_t R = batch.at(field::responses).size(1);
  const torch::Tensor& attention = batch.at(field::attention_mask);
  torch::Tensor lengths = attention.narrow(1, attention.size(1) - R, R).sum(1).to(torch::kFloat32);
  add_masked_stats(m, "response_length", lengths, real);
  m.add_mean("response_length/clip_ratio",
             ((lengths == static_cast<double>(R)).to(torch::kFloat32) * real).sum().item<double>(),
             real.sum().item<double>());
  torch::Tensor prompt_lengths = attention.sum(1) - lengths;
  add_masked_stats(m, "prompt_length", prompt_lengths, real);
  m.add_mean("perf/total_num_tokens", (batch.at(field::attention_mask).sum(1) * real).sum().item<double>(),
             1.0 / context.world_size());
  const auto tools = tool_use(batch);  // multi-turn rollouts: per trajectory
  const double count = tools.empty() ? 0 : real.sum().item<double>();
  for (const auto& [name, values] : tools)  // "tool/call_ratio" is a share; the others are means
    m.add_mean("tool/" + name + (name == "call_ratio" ? "" : "/mean"), (values * real).sum().item<double>(), count);
}

}  // namespace

PpoSteps::PpoSteps(Run& run)
    : run_(run),
      config_(run.config()),
      context_(run.context()),
      in_(run.inputs()),
      train_sources_(data_sources(in_.train_set, *in_.rewarder)),
      stages_(curriculum_stages(config_, in_.train_set, in_.train_file_sizes)),
      estimator_(adv_estimator(config_.algorithm.adv_estimator)),
      kl_penalty_(parse_kl_estimator(config_.algorithm.kl_penalty)),
      rollout_is_(parse_rollout_is_level(config_.algorithm.rollout_correction.rollout_is)) {
  const Derived& d = config_.derived;
  const int64_t vocab = vocab_size_for(config_, *in_.tokenizer), total = run.schedule().total_steps();
  const torch::Device device = context_.device();
  actor_ = Actor::policy(config_, vocab, total * config_.actor.ppo_epochs * d.actor_mini_batches, device);
  // A LoRA actor's reference is its own base, adapters off: no second copy of the weights.
  if (needs_reference() && !actor_->has_lora())
    ref_ = Actor::reference(config_, vocab, device, config_.parallel.zero_stage);
  if (estimator_.needs_critic)
    critic_ = std::make_unique<Critic>(
        config_, vocab, total * config_.critic.ppo_epochs * std::max<int64_t>(1, d.critic_mini_batches), device);
  const KlCtrlConfig& k = config_.algorithm.kl_ctrl;
  kl_ctrl_ = make_kl_controller(k.type, k.kl_coef, k.target_kl, static_cast<double>(k.horizon));
  if (context_.is_root()) {
    std::cout << "model: " << actor_->state().parameter_count() << " parameters (" << config_.model.num_layers
              << " layers, width " << config_.model.hidden_size << ", vocab " << vocab << ")"
              << (critic_ ? " + critic" : "") << (ref_ ? " + reference" : "")
              << (actor_->has_lora() ? " (LoRA rank " + std::to_string(config_.actor.lora.rank) + ": " +
                                           std::to_string(actor_->state().trained_count()) + " trained" +
                                           (needs_reference() ? ", the reference is the base" : "") + ")"
                                     : "")
              << "\n"
              << describe_batch(config_) << "run directory: " << run.run_dir().path() << "\n";
  }
}

void PpoSteps::load(const std::string& dir, const TrainerState& state) {
  actor_->load(dir, /*with_optimizer=*/true);
  actor_->optimizer().set_steps_taken(state.actor_optimizer_steps);
  if (critic_) {
    critic_->load(dir, /*with_optimizer=*/true);
    critic_->optimizer().set_steps_taken(state.critic_optimizer_steps);
  }
  kl_ctrl_.value = state.kl_coef;
  gen_batches_ = state.gen_batches;
}

void PpoSteps::save(const std::string& dir, TrainerState& state) {
  state.kl_coef = kl_ctrl_.value;
  state.actor_optimizer_steps = actor_->optimizer().steps_taken();
  state.critic_optimizer_steps = critic_ ? critic_->optimizer().steps_taken() : 0;
  state.gen_batches = gen_batches_;
  state.sampler_epoch = gen_batches_ / run_.schedule().steps_per_epoch();
  actor_->save(dir);
  if (critic_) critic_->save(dir);
}

void PpoSteps::check_identical(const std::string& when) {
  actor_->state().check_identical(context_, when);
  if (critic_) critic_->state().check_identical(context_, when + " (critic)");
}

ValMetrics PpoSteps::validate(int64_t step) {
  WorkerState::Phase phase(actor_->state(), /*whole_model=*/true);
  ValMetrics val =
      evaluate(actor_->model(), in_.val_set, *in_.rewarder, *in_.tokenizer, config_, context_, in_.environment.get());
  if (first_val_step_ < 0) first_val_ = val, first_val_step_ = step;
  last_val_ = val, last_val_step_ = step;
  return val;
}

std::map<std::string, double> PpoSteps::step(int64_t step) {
  Metrics m;
  const auto step_start = Clock::now();
  const Derived& d = config_.derived;
  const RolloutConfig& r = config_.rollout;
  const torch::Device device = context_.device();
  Batch batch = config_.algorithm.filter_groups.enable ? sample_with_signal(step, m)
                                                       : generate_scored(step, gen_batches_++, m).batch;
  if (config_.algorithm.mask_truncated_completions)
    batch.set(field::response_mask,
              mask_truncated(batch.at(field::responses), batch.at(field::response_mask), in_.tokenizer->eos_id()));
  if (config_.trainer.balance_batch && context_.world_size() > 1) {
    PhaseTimer t(m, "balance", device);
    const int64_t blocks = config_.data.train_batch_size / d.dispatch_block;
    BalancedBatch balanced = balance_batch(batch, d.responses_per_rank / blocks, r.n, context_);
    batch = balanced.batch;
    m.set("perf/rank_token_imbalance_before", balanced.imbalance_before);
    m.set("perf/rank_token_imbalance_after", balanced.imbalance_after);
  }
  const int64_t log_prob_budget = r.log_prob_use_dynamic_bsz ? r.log_prob_max_token_len_per_gpu : 0;
  {
    PhaseTimer t(m, "old_log_prob", device);
    batch.set(field::old_log_probs,
              actor_->compute_log_probs(batch, {r.log_prob_micro_batch_size_per_gpu, log_prob_budget,
                                                "rollout.log_prob_max_token_len_per_gpu"}));
    correct_rollout(batch, m);
  }
  if (needs_reference()) {
    PhaseTimer t(m, "ref", device);
    const MicroBatchSpec micro{config_.ref.log_prob_micro_batch_size_per_gpu, log_prob_budget,
                               "rollout.log_prob_max_token_len_per_gpu"};
    batch.set(field::ref_log_probs,
              ref_ ? ref_->compute_log_probs(batch, micro) : actor_->compute_base_log_probs(batch, micro));
  }
  if (critic_) {
    PhaseTimer t(m, "values", device);
    batch.set(field::values, critic_->compute_values(batch));
  }
  {
    PhaseTimer t(m, "adv", device);
    estimate_advantages(batch, m);
  }
  if (critic_) {
    PhaseTimer t(m, "update_critic", device);
    critic_->update(batch, d.critic_mini_batches, context_, m);
  }
  if (step > config_.trainer.critic_warmup) {
    PhaseTimer t(m, "update_actor", device);
    actor_->update_policy(batch, d.actor_mini_batches, context_, m);
  }
  std::map<std::string, double> metrics = finish_metrics(batch, m, step, seconds_since(step_start));
  score_curve_.push_back(metrics["critic/score/mean"]);
  return metrics;
}

PpoSteps::Scored PpoSteps::generate_scored(int64_t step, int64_t index, Metrics& m) {
  const RolloutConfig& r = config_.rollout;
  const torch::Device device = context_.device();
  const CurriculumStage& stage = stages_[curriculum_stage_of(config_, static_cast<int64_t>(stages_.size()), step)];
  const RankPrompts prompts = stage_prompts(stage, index, in_.train_set, *in_.tokenizer, config_, context_);
  Scored out;
  {
    PhaseTimer t(m, "gen", device);
    WorkerState::Phase phase(actor_->state(), /*whole_model=*/true);
    // The seeds mix in the generation batch's index, the 0-based step index when every step takes one batch, as
    // they always have: runs reproduce those of earlier versions.
    out.batch = rollout_batch(actor_->model(), *in_.tokenizer, prompts, {r.n, r.temperature, r.top_k, r.top_p, index},
                              config_, {false, {}, in_.environment.get()});
  }
  PhaseTimer t(m, "reward", device);
  add_reward_metrics(m, "reward/", compute_rewards(out.batch, prompts, r.n, *in_.rewarder, *in_.tokenizer),
                     train_sources_, context_);
  const std::string& metric = config_.algorithm.filter_groups.metric;
  if (metric == "acc") out.filter_values = out.batch.at(field::correct);
  if (metric == "score") out.filter_values = out.batch.at(field::scores);  // before the overlong punishment
  if (config_.reward.overlong_buffer.enable) punish_overlong(out.batch, m);
  if (metric == "seq_reward") out.filter_values = out.batch.at(field::scores);
  return out;
}

Batch PpoSteps::sample_with_signal(int64_t step, Metrics& m) {
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
    Scored scored = generate_scored(step, gen_batches_++, m);
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
  return dispatch_groups(concat_generations(kept, in_.tokenizer->pad_id()), group_rows, n,
                         config_.derived.dispatch_block, context_.world_size(), context_.rank(),
                         config_.parallel.pad_to_world);
}

void PpoSteps::punish_overlong(Batch& batch, Metrics& m) {
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

void PpoSteps::correct_rollout(Batch& batch, Metrics& m) {
  const torch::Tensor& mask = batch.at(field::response_mask);
  const torch::Tensor &old = batch.at(field::old_log_probs), &rollout = batch.at(field::rollout_log_probs);
  const RolloutGap gap = rollout_gap(old, rollout, mask);
  m.add_mean("training/rollout_probs_diff_mean", gap.probs_diff_sum, gap.tokens);
  m.add_max("training/rollout_probs_diff_max", gap.probs_diff_max);
  m.add_mean("rollout_corr/kl", gap.kl_sum, gap.tokens);
  m.add_mean("rollout_corr/k3_kl", gap.k3_kl_sum, gap.tokens);
  if (rollout_is_ == RolloutIsLevel::kOff) return;
  const RolloutCorrectionConfig& c = config_.algorithm.rollout_correction;
  torch::Tensor w =
      rollout_is_weights(old, rollout, mask, rollout_is_, c.rollout_is_threshold, c.rollout_is_threshold_lower);
  batch.set(field::rollout_is_weights, w);
  // veRL rollout_corr/rollout_is_mean and _max over the real tokens; the share of them whose weight is 0 (masking).
  const double tokens = mask.sum().item<double>();
  m.add_mean("rollout_corr/rollout_is_mean", w.sum().item<double>(), tokens);
  m.add_max("rollout_corr/rollout_is_max", w.max().item<double>());
  m.add_mean("rollout_corr/rollout_is_masked_fraction", ((w == 0) & (mask > 0)).sum().item<double>(), tokens);
}

void PpoSteps::estimate_advantages(Batch& batch, Metrics& m) {
  const torch::Tensor& mask = batch.at(field::response_mask);
  torch::Tensor token_rewards = batch.at(field::token_scores);
  const SumReducer reduce = rank_sum_reducer(context_);
  if (config_.algorithm.use_kl_in_reward) {
    KlInReward kl = apply_kl_in_reward(batch.at(field::token_scores), batch.at(field::old_log_probs),
                                       batch.at(field::ref_log_probs), mask, batch.at(field::sample_mask),
                                       kl_ctrl_.value, kl_penalty_, reduce);
    token_rewards = kl.token_rewards;
    m.set("actor/reward_kl_penalty", kl.current_kl);
    m.set("actor/reward_kl_penalty_coeff", kl_ctrl_.value);
    kl_ctrl_.update(kl.current_kl, static_cast<int64_t>(kl.num_sequences));
  }
  AdvantageInputs in;
  in.token_rewards = token_rewards;
  in.values = batch.has(field::values) ? batch.at(field::values) : torch::zeros_like(token_rewards);
  in.response_mask = mask;
  in.group_ids = batch.at(field::group_id);
  in.gamma = config_.algorithm.gamma;
  in.lam = config_.algorithm.lam;
  in.norm_adv_by_std_in_grpo = config_.algorithm.norm_adv_by_std_in_grpo;
  in.reduce = reduce;
  Advantages adv = compute_advantages(estimator_, in);
  batch.set(field::token_rewards, token_rewards);
  batch.set(field::advantages, adv.advantages * mask);
  batch.set(field::returns, adv.returns * mask);
}

std::map<std::string, double> PpoSteps::finish_metrics(const Batch& batch, Metrics& m, int64_t step, double step_time) {
  add_data_metrics(batch, context_, m);
  m.add_max("memory/host_state_mib", static_cast<double>(host_memory_stats().current_bytes) / (1 << 20));
  // What this rank holds of the models' state (parameters + gradients + optimizer state, as allocated at the
  // optimizer steps; the reference: its parameters), and at stage 3 the whole-policy copy generation gathered.
  int64_t state_bytes = actor_->state().model_state_bytes();
  if (critic_) state_bytes += critic_->state().model_state_bytes();
  if (ref_) state_bytes += ref_->state().model_state_bytes();
  m.add_max("memory/model_state_mib", static_cast<double>(state_bytes) / (1 << 20));
  int64_t optimizer_bytes = actor_->optimizer().state_bytes();
  if (critic_) optimizer_bytes += critic_->optimizer().state_bytes();
  m.add_max("memory/optimizer_state_mib", static_cast<double>(optimizer_bytes) / (1 << 20));
  if (actor_->state().gathered_bytes() > 0)
    m.add_max("memory/generation_copy_mib", static_cast<double>(actor_->state().gathered_bytes()) / (1 << 20));
  m.set("timing_s/step", step_time);
  auto out = m.reduce(context_);
  double peak_mib = 0;
  for (const auto& [k, v] : out)
    if (k.rfind("memory/", 0) == 0 && k.find("_peak_mib") != std::string::npos) peak_mib = std::max(peak_mib, v);
  out["perf/max_memory_allocated_gb"] = peak_mib / 1024;
  out["perf/throughput"] = out["perf/total_num_tokens"] / (step_time * context_.world_size());
  out["perf/time_per_step"] = step_time;
  out["training/global_step"] = static_cast<double>(step);
  // The epoch of the step's last prompts, in their stage; the curriculum stage (0-based).
  const int64_t stage = curriculum_stage_of(config_, static_cast<int64_t>(stages_.size()), step);
  out["training/epoch"] = static_cast<double>(stages_[stage].schedule.epoch(gen_batches_));
  if (stages_.size() > 1) out["training/curriculum_stage"] = static_cast<double>(stage);
  return out;
}

std::string PpoSteps::progress(const std::map<std::string, double>& metrics) const {
  const auto value = [&](const char* key) { return metrics.count(key) ? metrics.at(key) : 0.0; };
  char text[160];
  std::snprintf(text, sizeof text, "score %.3f | acc %.3f | kl %.4f | pg_loss %.4f", value("critic/score/mean"),
                value("critic/acc/mean"), value("actor/ppo_kl"), value("actor/pg_loss"));
  return text;
}

void PpoSteps::summarize() {
  if (score_curve_.empty()) return;  // a resumed run with no step left
  auto mean = [&](size_t from, size_t to) {
    double s = 0;
    for (size_t i = from; i < to; ++i) s += score_curve_[i];
    return s / static_cast<double>(to - from);
  };
  size_t k = std::max<size_t>(1, score_curve_.size() / 5);
  std::printf("score curve: first %zu steps %.3f -> last %zu steps %.3f (critic/score/mean)\n", k, mean(0, k), k,
              mean(score_curve_.size() - k, score_curve_.size()));
  if (first_val_step_ >= 0 && last_val_step_ > first_val_step_) {
    std::printf("validation by difficulty (%s decoding, %zu prompts):\n",
                config_.rollout.val_temperature > 0 ? "sampled" : "greedy", in_.val_set.size());
    print_val_comparison(first_val_, "step " + std::to_string(first_val_step_), last_val_,
                         "step " + std::to_string(last_val_step_), in_.val_set, *in_.rewarder);
  }
  if (logger_enabled(config_.trainer, "jsonl")) {
    const std::string svg = run_.run_dir().path() + "/curves.svg";
    write_svg_chart(svg, run_curve_panels(read_run_curves(run_.run_dir().path() + "/metrics.jsonl", in_.val_source),
                                          config_.data.task + " / " + config_.algorithm.adv_estimator));
    std::printf("curves (score and accuracy per step): %s\n", svg.c_str());
  }
  std::printf("run directory: %s (%scheckpoints/)\n", run_.run_dir().path().c_str(),
              (std::string(logger_enabled(config_.trainer, "jsonl") ? "metrics.jsonl, " : "") +
               (logger_enabled(config_.trainer, "tensorboard")
                    ? "TensorBoard events: tensorboard --logdir " + logdir_of(run_.run_dir().path()) + ", "
                    : ""))
                  .c_str());
}

int run_train(Config& config) {
  return fit_run<PpoSteps>(config, RunMode::train);
}

}  // namespace ppo
