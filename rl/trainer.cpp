#include "rl/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <set>
#include <thread>

#include "common/error.h"
#include "rl/algorithms.h"
#include "rollout/rollout.h"

namespace ppo {
namespace {

// The folder to give `tensorboard --logdir` so that the run shows under its own name: the run directory's parent.
std::string logdir_of(const std::string& run_dir) {
  const std::filesystem::path parent = std::filesystem::path(run_dir).lexically_normal().parent_path();
  return parent.empty() ? "." : parent.string();
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// verl's named phase timer: records timing_s/<name> when it goes out of scope, and the phase's memory on the compute
// device (rl/memory.h): memory/<name>_peak_mib, the most held by live tensors during the phase, all state included,
// and memory/<name>_added_mib, that peak above what was held when the phase began (activations, gradients,
// temporaries). Both are maxima over ranks.
class PhaseTimer {
 public:
  PhaseTimer(Metrics& metrics, std::string name, torch::Device device)
      : metrics_(metrics), name_(std::move(name)), device_(device), start_(Clock::now()) {
    reset_memory_peak(device_);
    start_bytes_ = memory_stats(device_).current_bytes;
  }
  ~PhaseTimer() {
    metrics_.set("timing_s/" + name_, seconds_since(start_));
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
};

SumReducer context_reducer(Context& context) {
  return [&context](const torch::Tensor& t) {
    torch::Tensor out = t.contiguous().clone();
    context.all_reduce(out, ReduceOp::sum);
    return out;
  };
}

// mean / max / min over the entries where `mask` is 1 (real rows [B], or real tokens [B, R]), reduced over all ranks.
void add_masked_stats(Metrics& m, const std::string& name, const torch::Tensor& values, const torch::Tensor& mask) {
  torch::Tensor v = values.to(torch::kFloat64), keep = mask.to(torch::kBool);
  m.add_mean(name + "/mean", (v * keep).sum().item<double>(), keep.sum().item<double>());
  const double inf = std::numeric_limits<double>::infinity();
  bool any = keep.any().item<bool>();
  m.add_max(name + "/max", any ? v.masked_select(keep).max().item<double>() : -inf);
  m.add_min(name + "/min", any ? v.masked_select(keep).min().item<double>() : inf);
}

void set_threads(const Config& config, Context& context) {
  int64_t threads = config.trainer.num_threads;
  if (threads <= 0) {
    int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
    threads = std::max<int64_t>(1, cores / context.local_size());
  }
  torch::set_num_threads(static_cast<int>(threads));
}

}  // namespace

// ---- validation ----

ValMetrics evaluate(CausalLM& model, const std::vector<TaskSample>& samples, const Task& task,
                    const Tokenizer& tokenizer, const Config& config, Context& context) {
  Metrics m;
  const std::string prefix = "val/" + task.name();
  std::set<int64_t> difficulties;
  for (const auto& s : samples) difficulties.insert(s.difficulty);
  const int64_t batch = config.data.val_batch_size, world = context.world_size();
  SamplingParams sampling{1, config.rollout.val_temperature, config.rollout.top_k, config.rollout.top_p, -1};
  for (size_t begin = 0; begin < samples.size(); begin += batch) {
    std::vector<TaskSample> chunk(samples.begin() + begin,
                                  samples.begin() + std::min(samples.size(), begin + static_cast<size_t>(batch)));
    RankPrompts prompts =
        rank_prompts(chunk, tokenizer, config, static_cast<int64_t>(chunk.size()), world, context.rank(), /*pad=*/true);
    Batch b = rollout_generate(model, tokenizer, prompts, sampling, config);
    reward_compute(b, prompts, 1, task, tokenizer);
    const torch::Tensor& real = b.at("sample_mask");
    m.add_mean(prefix + "/score/mean", (b.at("scores") * real).sum().item<double>(), real.sum().item<double>());
    m.add_mean(prefix + "/acc/mean", (b.at("correct") * real).sum().item<double>(), real.sum().item<double>());
    for (int64_t d : difficulties) {
      torch::Tensor sel = real * (b.at("difficulty") == d).to(torch::kFloat32);
      m.add_mean(prefix + "/acc/" + std::to_string(d), (b.at("correct") * sel).sum().item<double>(),
                 sel.sum().item<double>());
    }
  }
  return m.reduce(context);
}

// ---- the trainer ----

Trainer::Trainer(Config& config, Context& context)
    : config_(config),
      context_(context),
      run_dir_(config.trainer.output_dir, context.is_root(), config.trainer.logger) {
  set_threads(config_, context_);
  task_ = make_task(config_.data.task);
  tokenizer_ = make_tokenizer(config_.model.tokenizer);
  train_set_ = load_prompts(config_, *task_, true);
  val_set_ = load_prompts(config_, *task_, false);
  const int64_t per_epoch = steps_per_epoch(static_cast<int64_t>(train_set_.size()), config_.data.train_batch_size);
  usage_check(per_epoch >= 1, "data: " + std::to_string(train_set_.size()) +
                                  " training prompts are fewer than data.train_batch_size=" +
                                  std::to_string(config_.data.train_batch_size));
  total_steps_ = config_.trainer.total_training_steps > 0 ? config_.trainer.total_training_steps
                                                          : config_.trainer.total_epochs * per_epoch;
  const Derived& d = config_.derived;
  const int64_t vocab = vocab_size_for(config_, *tokenizer_);
  const torch::Device device = context_.device();
  actor_ = std::make_unique<Actor>(config_, vocab, true, total_steps_ * config_.actor.ppo_epochs * d.actor_mini_batches,
                                   device);
  if (config_.actor.use_kl_loss || config_.algorithm.use_kl_in_reward)
    ref_ = std::make_unique<Actor>(config_, vocab, false, 0, device);
  if (estimator_needs_critic(config_.algorithm.adv_estimator))
    critic_ = std::make_unique<Critic>(
        config_, vocab, total_steps_ * config_.critic.ppo_epochs * std::max<int64_t>(1, d.critic_mini_batches), device);
  const KlCtrlConfig& k = config_.algorithm.kl_ctrl;
  kl_ctrl_ = make_kl_controller(k.type, k.kl_coef, k.target_kl, static_cast<double>(k.horizon));
  if (context_.is_root()) {
    std::cout << "model: " << parameter_count(*actor_->model()) << " parameters (" << config_.model.num_layers
              << " layers, width " << config_.model.hidden_size << ", vocab " << vocab << ")"
              << (critic_ ? " + critic" : "") << (ref_ ? " + reference" : "") << "\n"
              << describe_batch(config_) << "run directory: " << run_dir_.path() << "\n";
  }
  resume();
  check_identical_across_ranks(actor_->model()->parameters(), context_, "start-up");
  if (critic_) check_identical_across_ranks(critic_->model()->parameters(), context_, "start-up (critic)");
  run_dir_.write_config(config_);
}

void Trainer::resume() {
  const std::string dir = run_dir_.resume_path(config_.trainer.resume_mode);
  if (dir.empty()) {
    run_dir_.archive_metrics();
    return;
  }
  nlohmann::json state = read_json_file(dir + "/trainer_state.json");
  actor_->load(dir, true);
  actor_->optimizer().set_steps_taken(state.at("actor_optimizer_steps").get<int64_t>());
  if (critic_) {
    critic_->load(dir, true);
    critic_->optimizer().set_steps_taken(state.value("critic_optimizer_steps", int64_t{0}));
  }
  kl_ctrl_.value = state.at("kl_coef").get<double>();
  start_step_ = state.at("global_step").get<int64_t>();
  run_dir_.truncate_metrics_after(start_step_);
  if (context_.is_root()) std::cout << "resumed from " << dir << " at step " << start_step_ << "\n";
}

void Trainer::save_checkpoint(int64_t step) {
  if (!config_.trainer.write_checkpoints) return;
  nlohmann::json state = {{"global_step", step},
                          {"kl_coef", kl_ctrl_.value},
                          {"actor_optimizer_steps", actor_->optimizer().steps_taken()},
                          {"critic_optimizer_steps", critic_ ? critic_->optimizer().steps_taken() : 0},
                          {"data_seed", config_.data.seed},
                          {"sampler_epoch", step / steps_per_epoch(static_cast<int64_t>(train_set_.size()),
                                                                   config_.data.train_batch_size)}};
  run_dir_.save_checkpoint(
      step,
      [&](const std::string& dir) {
        actor_->save(dir);
        if (critic_) critic_->save(dir);
        write_json_file(dir + "/trainer_state.json", state);
      },
      config_.trainer.max_ckpt_to_keep);
  context_.barrier();
}

void Trainer::fit() {
  if (config_.trainer.val_before_train && start_step_ == 0) {
    OnDevice on(actor_->placement());
    ValMetrics val = evaluate(actor_->model(), val_set_, *task_, *tokenizer_, config_, context_);
    nlohmann::json line(val);
    line["training/global_step"] = 0;
    run_dir_.append_metrics(line);
    if (context_.is_root())
      std::printf("validation before training: acc %.3f score %.3f\n", val["val/" + task_->name() + "/acc/mean"],
                  val["val/" + task_->name() + "/score/mean"]);
  }
  const auto start = Clock::now();
  for (int64_t step = start_step_ + 1; step <= total_steps_; ++step) {
    auto metrics = train_step(step - 1);
    const bool last = step == total_steps_;
    if (config_.trainer.test_freq > 0 && (step % config_.trainer.test_freq == 0 || last)) {
      OnDevice on(actor_->placement());
      for (const auto& [k, v] : evaluate(actor_->model(), val_set_, *task_, *tokenizer_, config_, context_))
        metrics[k] = v;
    }
    log_step(step, metrics, seconds_since(start));
    const int64_t check = config_.parallel.check_params_freq;
    if (check > 0 && step % check == 0)
      check_identical_across_ranks(actor_->model()->parameters(), context_, "step " + std::to_string(step));
    if (last || (config_.trainer.save_freq > 0 && step % config_.trainer.save_freq == 0)) save_checkpoint(step);
  }
  if (context_.is_root() && !score_curve_.empty()) {
    auto mean = [&](size_t from, size_t to) {
      double s = 0;
      for (size_t i = from; i < to; ++i) s += score_curve_[i];
      return s / static_cast<double>(to - from);
    };
    size_t k = std::max<size_t>(1, score_curve_.size() / 5);
    std::printf("score curve: first %zu steps %.3f -> last %zu steps %.3f (critic/score/mean)\n", k, mean(0, k), k,
                mean(score_curve_.size() - k, score_curve_.size()));
    std::printf("run directory: %s (%scheckpoints/)\n", run_dir_.path().c_str(),
                (std::string(logger_enabled(config_.trainer, "jsonl") ? "metrics.jsonl, " : "") +
                 (logger_enabled(config_.trainer, "tensorboard")
                      ? "TensorBoard events: tensorboard --logdir " + logdir_of(run_dir_.path()) + ", "
                      : ""))
                    .c_str());
  }
}

std::map<std::string, double> Trainer::train_step(int64_t step) {
  // Test hook: PPO_FAULT_RANK=r makes rank r fail in its first step (the job must end, not hang).
  if (const char* fault = std::getenv("PPO_FAULT_RANK"); fault && std::atoi(fault) == context_.rank())
    throw std::runtime_error("injected fault (PPO_FAULT_RANK=" + std::string(fault) + ")");
  Metrics m;
  const auto step_start = Clock::now();
  const Derived& d = config_.derived;
  std::vector<TaskSample> global;
  for (int64_t i : step_prompt_indices(static_cast<int64_t>(train_set_.size()), config_.data.train_batch_size, step,
                                       static_cast<uint64_t>(config_.data.seed), config_.data.shuffle))
    global.push_back(train_set_[i]);
  RankPrompts prompts = rank_prompts(global, *tokenizer_, config_, d.dispatch_block, context_.world_size(),
                                     context_.rank(), config_.parallel.pad_to_world);
  const RolloutConfig& r = config_.rollout;
  const torch::Device device = context_.device();
  Batch batch;
  {
    PhaseTimer t(m, "gen", device);
    OnDevice on(actor_->placement());
    batch =
        rollout_generate(actor_->model(), *tokenizer_, prompts, {r.n, r.temperature, r.top_k, r.top_p, step}, config_);
  }
  {
    PhaseTimer t(m, "reward", device);
    reward_compute(batch, prompts, r.n, *task_, *tokenizer_);
  }
  if (config_.trainer.balance_batch && context_.world_size() > 1) {
    PhaseTimer t(m, "balance", device);
    const int64_t blocks = config_.data.train_batch_size / d.dispatch_block;
    batch = balance_batch(batch, d.responses_per_rank / blocks, r.n, context_, m);
  }
  const int64_t log_prob_budget = r.log_prob_use_dynamic_bsz ? r.log_prob_max_token_len_per_gpu : 0;
  {
    PhaseTimer t(m, "old_log_prob", device);
    batch.set("old_log_probs", actor_->compute_log_probs(batch, {r.log_prob_micro_batch_size_per_gpu, log_prob_budget,
                                                                 "rollout.log_prob_max_token_len_per_gpu"}));
  }
  if (ref_) {
    PhaseTimer t(m, "ref", device);
    batch.set("ref_log_probs",
              ref_->compute_log_probs(batch, {config_.ref.log_prob_micro_batch_size_per_gpu, log_prob_budget,
                                              "rollout.log_prob_max_token_len_per_gpu"}));
  }
  if (critic_) {
    PhaseTimer t(m, "values", device);
    batch.set("values", critic_->compute_values(batch));
  }
  {
    PhaseTimer t(m, "adv", device);
    compute_advantage(batch, m);
  }
  if (critic_) {
    PhaseTimer t(m, "update_critic", device);
    critic_->update(batch, d.critic_mini_batches, context_, m);
  }
  if (step >= config_.trainer.critic_warmup) {
    PhaseTimer t(m, "update_actor", device);
    actor_->update_policy(batch, d.actor_mini_batches, context_, m);
  }
  add_data_metrics(batch, m);
  m.add_max("memory/host_state_mib", static_cast<double>(host_memory_stats().current_bytes) / (1 << 20));
  const double step_time = seconds_since(step_start);
  m.set("timing_s/step", step_time);
  auto out = m.reduce(context_);
  double peak_mib = 0;
  for (const auto& [k, v] : out)
    if (k.rfind("memory/", 0) == 0 && k.find("_peak_mib") != std::string::npos) peak_mib = std::max(peak_mib, v);
  out["perf/max_memory_allocated_gb"] = peak_mib / 1024;
  out["perf/throughput"] = out["perf/total_num_tokens"] / (step_time * context_.world_size());
  out["perf/time_per_step"] = step_time;
  out["training/global_step"] = static_cast<double>(step + 1);
  out["training/epoch"] = static_cast<double>(
      step / steps_per_epoch(static_cast<int64_t>(train_set_.size()), config_.data.train_batch_size));
  return out;
}

void Trainer::compute_advantage(Batch& batch, Metrics& m) {
  const torch::Tensor& mask = batch.at("response_mask");
  torch::Tensor token_rewards = batch.at("token_scores");
  SumReducer reduce = context_reducer(context_);
  if (config_.algorithm.use_kl_in_reward) {
    KlInReward kl = apply_kl_in_reward(batch.at("token_scores"), batch.at("old_log_probs"), batch.at("ref_log_probs"),
                                       mask, kl_ctrl_.value, config_.algorithm.kl_penalty, reduce);
    token_rewards = kl.token_rewards;
    // Per-sequence mean KL over the real samples of the global batch.
    torch::Tensor seq_kl = kl.kl.sum(1) / mask.sum(1).clamp_min(1);
    const torch::Tensor& real = batch.at("sample_mask");
    torch::Tensor sums = torch::stack({(seq_kl * real).sum(), real.sum()}).to(torch::kFloat64);
    context_.all_reduce(sums, ReduceOp::sum);
    const double current_kl = sums[0].item<double>() / std::max(1.0, sums[1].item<double>());
    m.set("actor/reward_kl_penalty", current_kl);
    m.set("actor/reward_kl_penalty_coeff", kl_ctrl_.value);
    kl_ctrl_.update(current_kl, static_cast<int64_t>(sums[1].item<double>()));
  }
  AdvantageInputs in;
  in.token_rewards = token_rewards;
  in.values = batch.has("values") ? batch.at("values") : torch::zeros_like(token_rewards);
  in.response_mask = mask;
  in.group_ids = batch.at("group_id");
  in.gamma = config_.algorithm.gamma;
  in.lam = config_.algorithm.lam;
  in.norm_adv_by_std_in_grpo = config_.algorithm.norm_adv_by_std_in_grpo;
  in.reduce = reduce;
  Advantages adv = compute_advantages(config_.algorithm.adv_estimator, in);
  batch.set("token_rewards", token_rewards);
  batch.set("advantages", adv.advantages * mask);
  batch.set("returns", adv.returns * mask);
}

void Trainer::add_data_metrics(const Batch& batch, Metrics& m) const {
  const torch::Tensor& real = batch.at("sample_mask");
  const torch::Tensor& mask = batch.at("response_mask");
  add_masked_stats(m, "critic/score", batch.at("scores"), real);
  add_masked_stats(m, "critic/rewards", (batch.at("token_rewards") * mask).sum(1), real);
  m.add_mean("critic/acc/mean", (batch.at("correct") * real).sum().item<double>(), real.sum().item<double>());
  add_masked_stats(m, "critic/advantages", batch.at("advantages"), mask);
  add_masked_stats(m, "critic/returns", batch.at("returns"), mask);
  if (batch.has("values")) {
    add_masked_stats(m, "critic/values", batch.at("values"), mask);
    // Explained variance from global moments of returns and (returns - values).
    torch::Tensor ret = batch.at("returns").to(torch::kFloat64), err = ret - batch.at("values").to(torch::kFloat64);
    torch::Tensor md = mask.to(torch::kFloat64);
    torch::Tensor sums =
        torch::stack({md.sum(), (ret * md).sum(), (ret * ret * md).sum(), (err * md).sum(), (err * err * md).sum()});
    context_.all_reduce(sums, ReduceOp::sum);
    auto s = sums.accessor<double, 1>();
    const double n = s[0];
    auto var = [n](double sum, double sq) { return n > 1 ? (sq - sum * sum / n) / (n - 1) : 0.0; };
    m.set("critic/vf_explained_var", 1.0 - var(s[3], s[4]) / (var(s[1], s[2]) + 1e-5));
  }
  torch::Tensor lengths = mask.sum(1);
  add_masked_stats(m, "response_length", lengths, real);
  const double R = static_cast<double>(mask.size(1));
  m.add_mean("response_length/clip_ratio", ((lengths == R).to(torch::kFloat32) * real).sum().item<double>(),
             real.sum().item<double>());
  torch::Tensor prompt_lengths = batch.at("attention_mask").sum(1) - lengths;
  add_masked_stats(m, "prompt_length", prompt_lengths, real);
  m.add_mean("perf/total_num_tokens", (batch.at("attention_mask").sum(1) * real).sum().item<double>(),
             1.0 / context_.world_size());
}

void Trainer::log_step(int64_t step, std::map<std::string, double> metrics, double elapsed) {
  score_curve_.push_back(metrics["critic/score/mean"]);
  nlohmann::json line;
  for (const auto& [k, v] : metrics) line[k] = std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
  run_dir_.append_metrics(line);
  if (!context_.is_root() || !logger_enabled(config_.trainer, "console")) return;
  if (step % std::max<int64_t>(1, config_.trainer.log_freq) != 0 && step != total_steps_) return;
  const double per_step = elapsed / static_cast<double>(step - start_step_);
  const double eta = per_step * static_cast<double>(total_steps_ - step);
  std::printf("step %lld/%lld | score %.3f | acc %.3f | kl %.4f | pg_loss %.4f | %.2f s/step | ETA %.0f s",
              static_cast<long long>(step), static_cast<long long>(total_steps_), metrics["critic/score/mean"],
              metrics["critic/acc/mean"], metrics.count("actor/ppo_kl") ? metrics["actor/ppo_kl"] : 0.0,
              metrics.count("actor/pg_loss") ? metrics["actor/pg_loss"] : 0.0, per_step, eta);
  const std::string val = "val/" + task_->name() + "/acc/mean";
  if (metrics.count(val)) std::printf(" | val acc %.3f", metrics[val]);
  std::printf("\n");
  std::fflush(stdout);
}

int run_train(Config& config) {
  Context& context = Context::get();
  validate(config, context.world_size());
  Trainer trainer(config, context);
  trainer.fit();
  return 0;
}

}  // namespace ppo
