// See train/run.h.
#include "train/run.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <optional>
#include <tuple>

#include "common/error.h"
#include "common/files.h"
#include "common/host_memory.h"
#include "common/strings.h"
#include "common/utf8.h"
#include "model/model_shape.h"
#include "model/transformer.h"
#include "records/tracker.h"
#include "rl/distillation.h"
#include "tasks/datasets.h"
#include "text/tokenizers.h"
#include "train/distillation.h"
#include "train/prompts.h"
#include "workers/memory.h"

namespace ppo {
namespace {

using Clock = std::chrono::steady_clock;

// Set by scripts/ppo_elastic.sh, which restarts a job that ended abnormally: the attempt this process belongs to (0:
// the first) and the exit status of the one before. -1 without the launcher.
int64_t launcher_attempt() {
  const char* text = std::getenv("PPO_RESTART_COUNT");
  if (!text) return -1;
  const std::string digits = text;
  usage_check(!digits.empty() && digits.size() <= 9 && digits.find_first_not_of("0123456789") == std::string::npos,
              "PPO_RESTART_COUNT=" + utf8_printable(digits) + " is not a whole number in [0, 10^9)");
  return std::stoll(digits);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Test hooks: PPO_FAULT_RANK=r makes rank r fail at its next step (the job must end, not hang); PPO_KILL_RANK=r with
// PPO_KILL_STEP=s makes rank r kill itself (SIGKILL) as step s begins, in the first attempt of a job
// scripts/ppo_elastic.sh runs (`attempt` 0) or in any run without it.
void inject_fault_if_asked(Context& context, int64_t step, int64_t attempt) {
  if (const char* fault = std::getenv("PPO_FAULT_RANK"); fault && std::atoi(fault) == context.job_rank())
    throw std::runtime_error("injected fault (PPO_FAULT_RANK=" + std::string(fault) + ")");
  const char *kill_rank = std::getenv("PPO_KILL_RANK"), *kill_step = std::getenv("PPO_KILL_STEP");
  if (kill_rank && kill_step && attempt <= 0 && std::atoi(kill_rank) == context.job_rank() &&
      std::atoll(kill_step) == step)
    ::kill(::getpid(), SIGKILL);
  // One collective more on this rank than on the others (parallel.check_collectives must name it).
  if (const char* extra = std::getenv("PPO_FAULT_EXTRA_COLLECTIVE"); extra && std::atoi(extra) == context.job_rank())
    context.barrier();
}

// The training data's files, for messages: data.train_files, or the curriculum's.
std::string train_files_of(const Config& config) {
  return join(config.data.train_files.empty() ? config.data.curriculum.train_files : config.data.train_files, ", ");
}

// Root, at start-up: the prompts data.filter_overlong_prompts skipped, and the reward of each training data source.
void print_inputs(const Config& config, const RunInputs& in) {
  for (const auto& [skipped, set, file] :
       {std::tuple{in.skipped_train, &in.train_set, train_files_of(config)},
        std::tuple{in.skipped_val, &in.val_set, join(config.data.val_files, ", ")}}) {
    if (skipped > 0)
      std::printf(
          "data.filter_overlong_prompts: skipped %lld of %lld prompts of %s (longer than "
          "data.max_prompt_length=%lld tokens)\n",
          static_cast<long long>(skipped), static_cast<long long>(skipped + static_cast<int64_t>(set->size())),
          file.c_str(), static_cast<long long>(config.data.max_prompt_length));
  }
  const std::string rewards = join(data_sources(in.train_set, *in.rewarder), ", ", [&](const std::string& source) {
    return source + " -> " +
           (!config.reward.command.empty()    ? "reward.command"
            : !config.reward.function.empty() ? config.reward.function
                                              : reward_function_for(source));
  });
  std::printf("rewards by data source: %s\n", rewards.c_str());
}

// An external reward program answers one request (the first training prompt with an empty response) before any
// model loads: one that cannot start fails here.
void probe_reward_program(const Config& config, RunInputs& in) {
  if (config.reward.command.empty() || in.train_set.empty() || Context::get().role() == Role::trainer) return;
  const TaskSample& first = in.train_set.front();
  const std::optional<ChatTemplate> chat = prompt_chat_template(config, *in.tokenizer, any_chat_prompt(in.train_set));
  in.rewarder->score({{&first, prompt_text(first, chat_for(first, config, chat)), ""}});
}

}  // namespace

std::string RunSteps::val_report(const ValMetrics& val, const std::string& source) const {
  char text[96];
  const auto at = [&](const std::string& key) {
    const auto it = val.find("val/" + source + "/" + key + "/mean");
    return it == val.end() ? 0.0 : it->second;
  };
  std::snprintf(text, sizeof text, "acc %.3f score %.3f", at("acc"), at("score"));
  return text;
}

namespace {

// The teacher's config (distillation.teacher.model.path), its tokenizer the student's and its shape valid.
std::unique_ptr<Config> checked_teacher(const Config& config, const Tokenizer& tokenizer) {
  std::unique_ptr<Config> teacher = teacher_config(config);
  const std::unique_ptr<Tokenizer> teacher_tokenizer = make_tokenizer(teacher->model.tokenizer);
  check_teacher_tokenizer(tokenizer, config.model.tokenizer, *teacher_tokenizer,
                          teacher->model.tokenizer + " (" + config.distillation.teacher.model.path + ")");
  const int64_t vocab = vocab_size_for(*teacher, *teacher_tokenizer);
  const DistillationConfig& d = config.distillation;
  check_teacher_vocab(vocab_size_for(config, tokenizer), vocab, distill_spec(d.loss_mode).uses_topk() ? d.topk : 0);
  validate_model_config(teacher->model, vocab);
  return teacher;
}

}  // namespace

RunInputs load_run_inputs(const Config& config, Context& context, RunMode mode) {
  RunInputs in;
  in.shape = check_config(config, context.job_size(), mode);
  in.tokenizer = make_tokenizer(config.model.tokenizer);
  // The pad token falls back to EOS; without either no response could end, and no batch be padded.
  usage_check(in.tokenizer->eos_id() >= 0 && in.tokenizer->pad_id() >= 0,
              "model.tokenizer: '" + config.model.tokenizer +
                  "' names no eos_token (nor pad_token): tokenizer_config.json beside tokenizer.json gives them "
                  "(\"eos_token\": \"<|im_end|>\", say); responses could not end, nor batches be padded");
  // The model's shape is refused here, before the run folder is made.
  validate_model_config(config.model, vocab_size_for(config, *in.tokenizer));
  if (mode != RunMode::train && (config.parallel.rollout_ranks > 0 || config.async.max_staleness > 0) &&
      context.is_root())
    std::cout << "note: parallel.rollout_ranks=" << config.parallel.rollout_ranks
              << " and async.max_staleness=" << config.async.max_staleness
              << " are for `ppo train`; this subcommand runs every rank alike and does not use them\n";
  if (mode == RunMode::reward_model) {
    in.train_pairs = load_pairs(config, *in.tokenizer, /*train=*/true, &in.skipped_train);
    in.val_pairs = load_pairs(config, *in.tokenizer, /*train=*/false, &in.skipped_val);
    in.val_source = "pairs";
    return in;
  }
  if (mode == RunMode::train && config.distillation.enable) in.teacher = checked_teacher(config, *in.tokenizer);
  in.task = make_task(config.data.task);
  if (mode != RunMode::generation)
    in.train_set =
        load_prompts(config, *in.task, *in.tokenizer, /*train=*/true, &in.skipped_train, &in.train_file_sizes);
  in.val_set = load_prompts(config, *in.task, *in.tokenizer, /*train=*/false, &in.skipped_val);
  in.rewarder = std::make_unique<Rewarder>(config.reward, in.task->name(), context.rank(), context.world_size());
  in.rewarder->check(in.train_set);
  in.rewarder->check(in.val_set);
  in.val_source = data_sources(in.val_set, *in.rewarder).front();
  if (config.rollout.multi_turn.enable && context.role() != Role::trainer)  // the ranks that generate
    in.environment =
        std::make_unique<ToolEnvironment>(config.rollout.multi_turn.environment, context.rank(), context.world_size());
  return in;
}

Run::Run(const Config& config, Context& context, RunMode mode)
    : config_(config),
      context_(context),
      inputs_(load_run_inputs(config, context, mode)),
      run_dir_(config.trainer.output_dir, context.is_root(), config.trainer.logger),
      schedule_(
          config, inputs_.shape,
          static_cast<int64_t>(mode == RunMode::reward_model ? inputs_.train_pairs.size() : inputs_.train_set.size())) {
  if (inputs_.rewarder) probe_reward_program(config_, inputs_);
  if (context_.is_root() && inputs_.rewarder) print_inputs(config_, inputs_);
  reset_memory_peak(context_.device());
}

void Run::fit(RunSteps& steps) {
  resume(steps);
  const int64_t attempt = launcher_attempt();
  if (attempt > 0 && context_.is_root()) {
    const char* previous = std::getenv("PPO_PREVIOUS_EXIT");
    append_file(run_dir_.path() + "/restarts.jsonl", nlohmann::json{{"restart", attempt},
                                                                    {"previous_exit", previous ? previous : ""},
                                                                    {"resumed_at_step", start_step_},
                                                                    {"ranks", context_.job_size()},
                                                                    {"unix_time", std::time(nullptr)}}
                                                             .dump() +
                                                         "\n");
  }
  steps.check_identical("start-up");
  release_free_heap();  // what building and reading the models freed
  torch::Tensor startup = torch::tensor({static_cast<double>(memory_stats(context_.device()).peak_bytes)});
  context_.all_reduce(startup, ReduceOp::max);
  startup_peak_mib_ = startup.item<double>() / (1 << 20);
  run_dir_.write_config(config_);
  Trackers trackers(config_.trainer, run_dir_.path(), context_.is_root());  // closes the tracked runs at the end
  if (config_.trainer.val_before_train && start_step_ == 0) validate_before_training(steps);
  const auto start = Clock::now();
  for (int64_t step = start_step_ + 1; step <= schedule_.total_steps(); ++step) {
    inject_fault_if_asked(context_, step, attempt);
    std::map<std::string, double> metrics = steps.step(step);
    if (step == start_step_ + 1) metrics["memory/startup_peak_mib"] = startup_peak_mib_;
    if (attempt >= 0) metrics["elastic/restarts"] = static_cast<double>(attempt);
    if (schedule_.validates_at(step))
      for (const auto& [k, v] : steps.validate(step)) metrics[k] = v;
    log_step(steps, step, metrics, seconds_since(start));
    trackers.check();
    check_skipped_steps(step, metrics);
    const int64_t check = config_.parallel.check_params_freq;
    if (check > 0 && step % check == 0) steps.check_identical("step " + std::to_string(step));
    if (schedule_.saves_at(step) && context_.role() != Role::rollout) save_checkpoint(steps, step);
  }
  if (context_.is_root()) steps.summarize();
}

void Run::validate_before_training(RunSteps& steps) {
  ValMetrics val = steps.validate(0);
  if (val.empty()) return;  // ppo rm without validation pairs
  nlohmann::json line(val);
  line["training/global_step"] = 0;
  run_dir_.append_metrics(line);
  if (context_.is_root())
    std::printf("validation before training: %s\n", steps.val_report(val, inputs_.val_source).c_str());
}

void Run::resume(RunSteps& steps) {
  const std::string dir = run_dir_.resume_path(config_.trainer.resume_mode);
  if (dir.empty()) {
    run_dir_.archive_metrics();
    return;
  }
  const TrainerState state = read_trainer_state(dir + "/trainer_state.json");
  check_resume_state(dir, state, steps.kind());
  steps.load(dir, state);
  start_step_ = state.global_step;
  run_dir_.orphan_checkpoints_after(start_step_);  // first: it refuses a folder it cannot use before anything moves
  run_dir_.truncate_metrics_after(start_step_);
  if (context_.is_root()) std::cout << "resumed from " << dir << " at step " << start_step_ << "\n";
}

void Run::check_resume_state(const std::string& dir, const TrainerState& state, const std::string& kind) {
  auto subcommand = [](const std::string& k) { return "`ppo " + (k == "ppo" ? std::string("train") : k) + "`"; };
  usage_check(state.kind == kind, dir + " is a checkpoint of a " + subcommand(state.kind) + " run, and this is a " +
                                      subcommand(kind) + " run; start a run from its weights with " +
                                      (kind == "rm" ? "critic" : "actor") + ".init_checkpoint=<its folder>");
  std::filesystem::path folder = std::filesystem::path(dir).lexically_normal();
  if (folder.filename().empty()) folder = folder.parent_path();
  const std::string name = folder.filename().string(),
                    digits = name.rfind("global_step_", 0) == 0 ? name.substr(12) : "";
  if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos)
    usage_check(digits == std::to_string(state.global_step),
                dir + "/trainer_state.json says global_step " + std::to_string(state.global_step) +
                    ", but its folder is " + name + ": the file belongs to another checkpoint");
  if (state.config.empty()) {
    if (context_.is_root())
      std::cout << "note: " << dir << " records no config (an earlier version wrote it): the config is not compared\n";
    return;
  }
  const std::string changed = join(changed_run_keys(state.config, config_), "; ");
  if (changed.empty()) return;
  usage_check(config_.trainer.resume_allow_config_change,
              "resuming from " + dir + " with a config that changes the run's numbers: " + changed +
                  ". Resume with the checkpoint's values, or set trainer.resume_allow_config_change=true to go on "
                  "with these");
  if (context_.is_root())
    std::cout << "note: resuming with changed keys (trainer.resume_allow_config_change=true): " << changed << "\n";
}

void Run::save_checkpoint(RunSteps& steps, int64_t step) {
  TrainerState state;
  state.kind = steps.kind();
  state.config = config_record(config_);
  state.global_step = step;
  state.data_seed = config_.data.seed;
  state.gen_batches = step;  // one batch a step, unless the steps say otherwise (PPO's dynamic sampling)
  state.sampler_epoch = step / schedule_.steps_per_epoch();
  run_dir_.save_checkpoint(
      step,
      [&](const std::string& dir) {
        steps.save(dir, state);
        if (context_.is_root()) write_json_file(dir + "/trainer_state.json", trainer_state_json(state));
      },
      config_.trainer.max_ckpt_to_keep, [&](const std::string& dir) { return context_.all_gather(dir).front(); },
      [&] { context_.barrier(); });
  context_.barrier();
}

void Run::log_step(RunSteps& steps, int64_t step, const std::map<std::string, double>& metrics, double elapsed) {
  nlohmann::json line;
  for (const auto& [k, v] : metrics) line[k] = std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
  run_dir_.append_metrics(line);
  if (!context_.is_root() || !logger_enabled(config_.trainer, "console")) return;
  const int64_t total = schedule_.total_steps();
  if (step % std::max<int64_t>(1, config_.trainer.log_freq) != 0 && step != total) return;
  const double per_step = elapsed / static_cast<double>(step - start_step_);
  const double eta = per_step * static_cast<double>(total - step);
  std::printf("%sstep %lld/%lld | %s | %.2f s/step | ETA %.0f s",
              steps.kind() == "ppo" ? "" : (steps.kind() + " ").c_str(), static_cast<long long>(step),
              static_cast<long long>(total), steps.progress(metrics).c_str(), per_step, eta);
  const auto val = metrics.find("val/" + inputs_.val_source + "/acc/mean");
  if (val != metrics.end()) std::printf(" | val acc %.3f", val->second);
  std::printf("\n");
  std::fflush(stdout);
}

void Run::check_skipped_steps(int64_t step, const std::map<std::string, double>& metrics) {
  double skipped = 0;
  std::string which;
  for (const auto& [key, value] : metrics) {
    const size_t slash = key.find("/skipped_steps");
    if (slash == std::string::npos || slash + 14 != key.size() || value == 0) continue;
    skipped += value;
    char count[64];
    std::snprintf(count, sizeof count, "%g", value);
    which += (which.empty() ? "" : " and ") + std::string(count) + " " + key.substr(0, slash);
  }
  consecutive_skipped_ = skipped > 0 ? consecutive_skipped_ + 1 : 0;
  if (consecutive_skipped_ == 0) return;
  if (context_.is_root())
    std::printf(
        "warning: step %lld skipped %s optimizer steps (a non-finite gradient norm: those updates were not "
        "applied)\n",
        static_cast<long long>(step), which.c_str());
  const int64_t limit = config_.trainer.max_skipped_steps;
  if (limit > 0 && consecutive_skipped_ >= limit)
    throw std::runtime_error(std::to_string(consecutive_skipped_) +
                             " steps in a row skipped optimizer steps (a non-finite gradient norm), trainer." +
                             "max_skipped_steps=" + std::to_string(limit) + ": training has diverged; resume from " +
                             "an earlier checkpoint with a lower learning rate (metrics up to step " +
                             std::to_string(step) + " are in the run directory)");
}

}  // namespace ppo
