// The PPO step loop; see train/trainer.h.
#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>

#include "common/error.h"
#include "common/files.h"
#include "common/manifest.h"
#include "parallel/balance.h"
#include "records/plot.h"
#include "records/trainer_state.h"
#include "rl/algorithms.h"
#include "rollout/rollout.h"
#include "train/config_check.h"
#include "train/evaluate.h"
#include "train/experience.h"
#include "train/phase_timer.h"

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

namespace {

// Where the reverse-KL reward reaches each token summed with the later tokens' (GAE or REINFORCE++ at gamma > 0, or
// an estimator that sums a response's rewards into one score), the shortest response wins: a student far from its
// teacher learns to stop at once (docs/experiments/distillation.md). A line that says so; "" where each token is
// credited with its own KL only.
std::string reverse_kl_reward_note(const Config& config) {
  const AlgorithmConfig& a = config.algorithm;
  const bool per_token = a.adv_estimator == "gae" || a.adv_estimator == "reinforce_plus_plus";
  if (!config.distillation.enable || !distill_spec(config.distillation.loss_mode).reward || (per_token && a.gamma == 0))
    return "";
  std::ostringstream text;
  text << "note: distillation.loss_mode=reverse_kl_reward with algorithm.adv_estimator=" << a.adv_estimator;
  if (per_token) text << " and algorithm.gamma=" << a.gamma;
  text << " credits each token with the KL of the tokens after it too, which favours short responses; "
       << "algorithm.gamma=0 with gae or reinforce_plus_plus credits each with its own (Thinking Machines' recipe)\n";
  return text.str();
}

}  // namespace

PpoSteps::PpoSteps(Run& run)
    : run_(run),
      config_(run.config()),
      context_(run.context()),
      in_(run.inputs()),
      generator_(run),
      estimator_(adv_estimator(config_.algorithm.adv_estimator)),
      kl_penalty_(parse_kl_estimator(config_.algorithm.kl_penalty)),
      rollout_is_(parse_rollout_is_level(config_.algorithm.rollout_correction.rollout_is)) {
  const RunShape& d = run_.shape();
  const int64_t vocab = vocab_size_for(config_, *in_.tokenizer), total = run.schedule().total_steps();
  const torch::Device device = context_.device();
  actor_ = Actor::policy(config_, vocab, total * config_.actor.ppo_epochs * d.actor_mini_batches, device,
                         d.actor_micro_batch_size);
  // A LoRA actor's reference is its own base, adapters off: no second copy of the weights.
  if (needs_reference() && !actor_->has_lora())
    ref_ = Actor::reference(config_, vocab, device, config_.parallel.zero_stage);
  if (config_.distillation.enable) distill_ = distill_spec(config_.distillation.loss_mode);
  if (in_.teacher && context_.role() != Role::rollout) {
    teacher_ = Actor::reference(*in_.teacher, vocab_size_for(*in_.teacher, *in_.tokenizer), device,
                                config_.parallel.zero_stage);
    WorkerState::Phase phase(teacher_->state(), /*whole_model=*/true);
    check_logits_finite(
        teacher_->model(), in_.train_set, *in_.tokenizer, config_, device,
        "the teacher " + config_.distillation.teacher.model.path + " (distillation.teacher.model.path)");
  }
  if (estimator_.needs_critic)
    critic_ = std::make_unique<Critic>(config_, vocab,
                                       total * config_.critic.ppo_epochs * std::max<int64_t>(1, d.critic_mini_batches),
                                       device, d.critic_micro_batch_size);
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
              << (teacher_ ? "teacher: " + config_.distillation.teacher.model.path + " (" +
                                 std::to_string(teacher_->state().parameter_count()) + " parameters, " +
                                 config_.distillation.loss_mode + ")\n"
                           : "")
              << reverse_kl_reward_note(config_) << describe_batch(config_, run_.shape())
              << "run directory: " << run.run_dir().path() << "\n";
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
  generator_.set_gen_batches(state.gen_batches);
  generator_.set_reward_moments(state.reward_moments);
  // The manifest says whether the checkpoint holds a batch in flight: listed but deleted is an error, not a batch
  // generated again from other weights.
  const std::string in_flight = dir + "/" + kDeliveryFile;
  if (context_.role() == Role::trainer && (std::filesystem::exists(in_flight) || manifest_lists(in_flight)))
    in_flight_ = load_delivery(in_flight, config_, state);
}

void PpoSteps::save(const std::string& dir, TrainerState& state) {
  state.kl_coef = kl_ctrl_.value;
  state.actor_optimizer_steps = actor_->optimizer().steps_taken();
  state.critic_optimizer_steps = critic_ ? critic_->optimizer().steps_taken() : 0;
  // The sampler's position after the last batch generated: with a batch in flight, that one's.
  state.gen_batches = in_flight_ ? in_flight_->gen_batches : generator_.gen_batches();
  state.sampler_epoch = state.gen_batches / run_.schedule().steps_per_epoch();
  state.reward_moments = in_flight_ ? in_flight_->reward_moments : generator_.reward_moments();
  if (in_flight_ && context_.is_root()) save_delivery(dir + "/" + kDeliveryFile, *in_flight_);
  actor_->save(dir);
  if (critic_) critic_->save(dir);
}

void PpoSteps::check_identical(const std::string& when) {
  actor_->state().check_identical(context_, when);
  if (critic_) critic_->state().check_identical(context_, when + " (critic)");
}

ValMetrics PpoSteps::validate(int64_t step) {
  ValMetrics val;
  if (context_.role() == Role::trainer) {  // the rollout ranks validate
    start_roles();
    val = share_validation(context_, {});
  } else {
    WorkerState::Phase phase(actor_->state(), /*whole_model=*/true);
    val =
        evaluate(actor_->model(), in_.val_set, *in_.rewarder, *in_.tokenizer, config_, context_, in_.environment.get());
  }
  if (first_val_step_ < 0) first_val_ = val, first_val_step_ = step;
  last_val_ = val, last_val_step_ = step;
  return val;
}

std::map<std::string, double> PpoSteps::step(int64_t step) {
  Metrics m;
  const auto step_start = Clock::now();
  const RunShape& d = run_.shape();
  const RolloutConfig& r = config_.rollout;
  const torch::Device device = context_.device();
  Batch batch = step_batch(step, m);
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
  torch::Tensor student_argmax;  // with a teacher: the agreement metric's
  {
    PhaseTimer t(m, "old_log_prob", device);
    LogProbOptions options;
    options.entropy = false;
    options.argmax = teacher_ != nullptr;  // the agreement metric's
    TokenLogProbs old = actor_->compute_token_log_probs(
        batch, {r.log_prob_micro_batch_size_per_gpu, log_prob_budget, "rollout.log_prob_max_token_len_per_gpu"},
        options);
    batch.set(field::old_log_probs, old.log_probs);
    student_argmax = old.argmax;
    correct_rollout(batch, m);
    // Routing replay: the share of (token, MoE layer) pairs whose router, on the old policy, chose other experts
    // than the rollout recorded.
    const RoutingCount routing = actor_->take_routing_count();
    const double pairs = routing.pairs.defined() ? routing.pairs.item<double>() : 0;
    if (pairs > 0) m.add_mean("moe/routing_mismatch", routing.differ.item<double>(), pairs);
  }
  if (needs_reference()) {
    PhaseTimer t(m, "ref", device);
    const MicroBatchSpec micro{config_.ref.log_prob_micro_batch_size_per_gpu, log_prob_budget,
                               "rollout.log_prob_max_token_len_per_gpu"};
    batch.set(field::ref_log_probs,
              ref_ ? ref_->compute_log_probs(batch, micro) : actor_->compute_base_log_probs(batch, micro));
  }
  if (teacher_) {
    PhaseTimer t(m, "teacher", device);
    teach(batch, student_argmax, m);
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
  if (context_.role() == Role::trainer) exchange_with_rollout(step, m);
  std::map<std::string, double> metrics = finish_metrics(batch, m, step, seconds_since(step_start));
  score_curve_.push_back(metrics["critic/score/mean"]);
  return metrics;
}

void PpoSteps::start_roles() {
  if (roles_started_) return;
  roles_started_ = true;
  share_start(context_,
              {run_.start_step(), generator_.gen_batches(), in_flight_.has_value(), generator_.reward_moments()});
  sync_weights(context_, *actor_);
}

Batch PpoSteps::step_batch(int64_t step, Metrics& m) {
  if (context_.role() != Role::trainer) return generator_.generate(*actor_, step, m);
  start_roles();
  if (!in_flight_) {
    PhaseTimer t(m, "wait_rollout", context_.device());
    in_flight_ = receive_batch(context_, config_.rollout.n, in_.tokenizer->pad_id());
  }
  const Delivery delivery = std::move(*in_flight_);
  in_flight_.reset();
  rollout_metrics_ = delivery.metrics;
  generator_.set_gen_batches(delivery.gen_batches);
  generator_.set_reward_moments(delivery.reward_moments);
  // The weights this step starts from are those of step - 1.
  m.set("async/staleness", static_cast<double>(step - 1 - delivery.policy_version));
  return trainer_rows(delivery, config_, run_.shape().dispatch_block, context_);
}

void PpoSteps::exchange_with_rollout(int64_t step, Metrics& m) {
  {
    PhaseTimer t(m, "weight_sync", context_.device());
    const double sent = context_.bytes_sent();
    sync_weights(context_, *actor_);
    m.add_max("comm/weight_sync_sent_mib", (context_.bytes_sent() - sent) / (1 << 20));
  }
  if (generates_ahead(config_, run_.schedule(), step)) {
    PhaseTimer t(m, "wait_rollout", context_.device());
    in_flight_ = receive_batch(context_, config_.rollout.n, in_.tokenizer->pad_id());
  }
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

void PpoSteps::teach(Batch& batch, const torch::Tensor& student_argmax, Metrics& m) {
  const RolloutConfig& r = config_.rollout;
  const MicroBatchSpec micro{config_.distillation.teacher.log_prob_micro_batch_size_per_gpu,
                             r.log_prob_use_dynamic_bsz ? r.log_prob_max_token_len_per_gpu : 0,
                             "rollout.log_prob_max_token_len_per_gpu"};
  LogProbOptions options;
  options.entropy = false;
  options.argmax = true;
  if (distill_->uses_topk()) {
    options.topk = config_.distillation.topk;
    options.topk_vocab = vocab_size_for(config_, *in_.tokenizer);  // ids the student has
  }
  const TokenLogProbs teacher = teacher_->compute_token_log_probs(batch, micro, options);
  const torch::Tensor mask = batch.at(field::response_mask) * batch.at(field::sample_mask).unsqueeze(1);
  usage_check((torch::isfinite(teacher.log_probs) | (mask == 0)).all().item<bool>(),
              "distillation.teacher.model.path=" + config_.distillation.teacher.model.path +
                  ": the teacher gives non-finite log-probs on this step's responses; its weights are damaged, or "
                  "values of its config make them overflow");
  batch.set(field::teacher_log_probs, teacher.log_probs);
  const DistillSums sums =
      distill_sums(batch.at(field::old_log_probs), teacher.log_probs, student_argmax, teacher.argmax, mask);
  m.add_mean("distill/reverse_kl", sums.reverse_kl, sums.tokens);
  m.add_mean("distill/teacher_log_prob", sums.teacher_log_prob, sums.tokens);
  m.add_mean("distill/argmax_agreement", sums.argmax_agree, sums.tokens);
  if (!distill_->uses_topk()) return;
  batch.set(field::teacher_topk_ids, teacher.top_ids);
  batch.set(field::teacher_topk_log_probs, teacher.top_log_probs);
  // The teacher's probability on its k tokens (veRL's teacher_mass): how much of its distribution the loss sees.
  m.add_mean("distill/teacher_topk_mass", (teacher.top_log_probs.exp().sum(-1) * mask).sum().item<double>(),
             sums.tokens);
}

torch::Tensor PpoSteps::step_rewards(const Batch& batch) const {
  const torch::Tensor& scores = batch.at(field::token_scores);
  if (!distill_ || !distill_->reward) return scores;
  const DistillationConfig& d = config_.distillation;
  const torch::Tensor teacher = reverse_kl_rewards(batch.at(field::old_log_probs), batch.at(field::teacher_log_probs),
                                                   batch.at(field::response_mask), d.distillation_loss_coef);
  return d.use_policy_loss ? scores + teacher : teacher;
}

void PpoSteps::estimate_advantages(Batch& batch, Metrics& m) {
  const torch::Tensor& mask = batch.at(field::response_mask);
  torch::Tensor token_rewards = step_rewards(batch);
  const SumReducer reduce = rank_sum_reducer(context_);
  if (config_.algorithm.use_kl_in_reward) {
    KlInReward kl = apply_kl_in_reward(token_rewards, batch.at(field::old_log_probs), batch.at(field::ref_log_probs),
                                       mask, batch.at(field::sample_mask), kl_ctrl_.value, kl_penalty_, reduce);
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
  // A loss mode of distillation alone: the task's advantages are zero, so the policy loss adds nothing.
  const bool distill_alone = distill_ && !distill_->reward && !config_.distillation.use_policy_loss;
  batch.set(field::advantages, distill_alone ? torch::zeros_like(adv.advantages) : adv.advantages * mask);
  batch.set(field::returns, adv.returns * mask);
}

std::map<std::string, double> PpoSteps::finish_metrics(const Batch& batch, Metrics& m, int64_t step, double step_time) {
  add_data_metrics(batch, context_, m);
  m.add_max("memory/host_state_mib", static_cast<double>(host_memory_stats().current_bytes) / (1 << 20));
  // What this rank holds of the models' state (parameters + gradients + optimizer state, as allocated at the
  // optimizer steps; the reference and the teacher: their parameters), and at stage 3 the whole-policy copy
  // generation gathered.
  int64_t state_bytes = actor_->state().model_state_bytes();
  if (critic_) state_bytes += critic_->state().model_state_bytes();
  if (ref_) state_bytes += ref_->state().model_state_bytes();
  if (teacher_) state_bytes += teacher_->state().model_state_bytes();
  m.add_max("memory/model_state_mib", static_cast<double>(state_bytes) / (1 << 20));
  int64_t optimizer_bytes = actor_->optimizer().state_bytes();
  if (critic_) optimizer_bytes += critic_->optimizer().state_bytes();
  m.add_max("memory/optimizer_state_mib", static_cast<double>(optimizer_bytes) / (1 << 20));
  if (actor_->state().zero_stage() == 3)  // every trainer gathers (only job rank 0 sends, beside rollout ranks)
    m.add_max("memory/generation_copy_mib", static_cast<double>(actor_->state().gathered_bytes()) / (1 << 20));
  m.set("timing_s/step", step_time);
  auto out = m.reduce(context_);
  for (const auto& [key, value] : rollout_metrics_) out[key] = value;  // the rollout ranks'
  double peak_mib = 0;
  for (const auto& [k, v] : out)
    if (k.rfind("memory/", 0) == 0 && k.find("_peak_mib") != std::string::npos) peak_mib = std::max(peak_mib, v);
  out["perf/max_memory_allocated_gb"] = peak_mib / 1024;
  out["perf/throughput"] = out["perf/total_num_tokens"] / (step_time * context_.job_size());  // per rank of the job
  out["perf/time_per_step"] = step_time;
  out["training/global_step"] = static_cast<double>(step);
  // The epoch of the step's last prompts, in their stage; the curriculum stage (0-based).
  const int64_t stage = curriculum_stage_of(config_, static_cast<int64_t>(generator_.stages().size()), step);
  const std::vector<CurriculumStage>& stages = generator_.stages();
  out["training/epoch"] = static_cast<double>(stages[stage].schedule.epoch(generator_.gen_batches()));
  if (stages.size() > 1) out["training/curriculum_stage"] = static_cast<double>(stage);
  return out;
}

std::string PpoSteps::progress(const std::map<std::string, double>& metrics) const {
  const auto value = [&](const char* key) { return metrics.count(key) ? metrics.at(key) : 0.0; };
  char text[160];
  std::snprintf(text, sizeof text, "score %.3f | acc %.3f | kl %.4f | pg_loss %.4f", value("critic/score/mean"),
                value("critic/acc/mean"), value("actor/ppo_kl"), value("actor/pg_loss"));
  if (!teacher_) return text;
  char distill[80];  // on-policy distillation: the reverse KL to the teacher and the argmax agreement
  std::snprintf(distill, sizeof distill, " | teacher kl %.4f agree %.3f", value("distill/reverse_kl"),
                value("distill/argmax_agreement"));
  return text + std::string(distill);
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
  if (run_.run_dir().writes_jsonl()) {
    const std::string svg = run_.run_dir().path() + "/curves.svg";
    write_svg_chart(svg, run_curve_panels(read_run_curves(run_.run_dir().path() + "/metrics.jsonl", in_.val_source),
                                          config_.data.task + " / " + config_.algorithm.adv_estimator));
    std::printf("curves (score and accuracy per step): %s\n", svg.c_str());
  }
  std::printf("run directory: %s (%scheckpoints/)\n", run_.run_dir().path().c_str(),
              (std::string(run_.run_dir().writes_jsonl() ? "metrics.jsonl, " : "") +
               (logger_enabled(config_.trainer, "tensorboard")
                    ? "TensorBoard events: tensorboard --logdir " + logdir_of(run_.run_dir().path()) + ", "
                    : ""))
                  .c_str());
}

int run_train(const Config& config) {
  Context& context = Context::get();
  // A bad parallel.rollout_ranks is named before the job splits; load_run_inputs checks the rest.
  check_roles(config, context.job_size(), RunMode::train);
  context.split_roles(static_cast<int>(config.parallel.rollout_ranks));
  if (context.role() == Role::rollout) return fit_run<RolloutSteps>(config, RunMode::train);
  return fit_run<PpoSteps>(config, RunMode::train);
}

}  // namespace ppo
