// The loops beside PPO: supervised warm-start (sft), scoring a checkpoint (eval), sampling (generate).
#include <cstdio>
#include <iostream>

#include "common/error.h"
#include "rl/trainer.h"
#include "rollout/rollout.h"

namespace ppo {
namespace {

// prompt + reference answer + EOS, in the rollout layout (left-padded prompt, right-padded response).
Batch sft_batch(const RankPrompts& prompts, const Tokenizer& tokenizer, int64_t R) {
  const int64_t B = static_cast<int64_t>(prompts.ids.size()), P = prompts.prompt_width;
  torch::Tensor input_ids = torch::full({B, P + R}, tokenizer.pad_id(), torch::kInt64);
  torch::Tensor attention = torch::zeros({B, P + R}, torch::kInt64);
  torch::Tensor response_mask = torch::zeros({B, R});
  torch::Tensor sample_mask = torch::ones({B});
  for (int64_t b = 0; b < B; ++b) {
    const auto& prompt = prompts.ids[b];
    std::vector<int64_t> answer = tokenizer.encode(prompts.samples[b].answer);
    answer.push_back(tokenizer.eos_id());
    usage_check(static_cast<int64_t>(answer.size()) <= R,
                "the reference answer of prompt " + std::to_string(prompts.samples[b].index) + " has " +
                    std::to_string(answer.size()) +
                    " tokens with EOS, more than data.max_response_length=" + std::to_string(R));
    const int64_t offset = P - static_cast<int64_t>(prompt.size());
    for (size_t i = 0; i < prompt.size(); ++i) input_ids[b][offset + i] = prompt[i], attention[b][offset + i] = 1;
    for (size_t i = 0; i < answer.size(); ++i) {
      input_ids[b][P + i] = answer[i];
      attention[b][P + i] = 1;
      response_mask[b][i] = prompts.is_pad[b] ? 0.f : 1.f;
    }
    if (prompts.is_pad[b]) sample_mask[b] = 0.f;
  }
  Batch batch;
  batch.set("input_ids", input_ids);
  batch.set("attention_mask", attention);
  batch.set("position_ids", position_ids_from_mask(attention));
  batch.set("prompts", input_ids.slice(1, 0, P).clone());
  batch.set("responses", input_ids.slice(1, P, P + R).clone());
  batch.set("response_mask", response_mask);
  batch.set("sample_mask", sample_mask);
  return batch;
}

void print_val_table(const ValMetrics& val, const std::vector<TaskSample>& samples, const std::string& task) {
  std::map<int64_t, int64_t> counts;
  for (const auto& s : samples) counts[s.difficulty]++;
  std::printf("%-12s %8s %8s\n", "difficulty", "prompts", "accuracy");
  for (const auto& [d, n] : counts)
    std::printf("%-12lld %8lld %8.3f\n", static_cast<long long>(d), static_cast<long long>(n),
                val.at("val/" + task + "/acc/" + std::to_string(d)));
  std::printf("%-12s %8zu %8.3f   (mean score %.3f)\n", "all", samples.size(), val.at("val/" + task + "/acc/mean"),
              val.at("val/" + task + "/score/mean"));
}

}  // namespace

int run_sft(Config& config) {
  Context& context = Context::get();
  config.rollout.n = 1;                                    // one reference answer per prompt
  config.algorithm.adv_estimator = "reinforce_plus_plus";  // an estimator without a critic: SFT trains none
  try {
    validate(config, context.world_size());
  } catch (const UsageError& e) {
    throw UsageError(std::string("ppo sft trains on one answer per prompt (rollout.n=1): ") + e.what());
  }
  auto task = make_task(config.data.task);
  auto tokenizer = make_tokenizer(config.model.tokenizer);
  auto train_set = load_prompts(config, *task, true);
  auto val_set = load_prompts(config, *task, false);
  const int64_t per_epoch = steps_per_epoch(static_cast<int64_t>(train_set.size()), config.data.train_batch_size);
  usage_check(per_epoch >= 1, "data: fewer training prompts than data.train_batch_size");
  const int64_t total = config.trainer.total_training_steps > 0 ? config.trainer.total_training_steps
                                                                : config.trainer.total_epochs * per_epoch;
  const Derived& d = config.derived;
  Actor actor(config, vocab_size_for(config, *tokenizer), true, total * d.actor_mini_batches, context.device());
  RunDir run_dir(config.trainer.output_dir, context.is_root(), config.trainer.logger);
  run_dir.archive_metrics();
  run_dir.write_config(config);
  if (context.is_root())
    std::cout << "sft: " << parameter_count(*actor.model()) << " parameters, " << total << " steps of "
              << config.data.train_batch_size << " prompts; run directory: " << run_dir.path() << "\n";
  for (int64_t step = 1; step <= total; ++step) {
    Metrics m;
    std::vector<TaskSample> global;
    for (int64_t i : step_prompt_indices(static_cast<int64_t>(train_set.size()), config.data.train_batch_size, step - 1,
                                         static_cast<uint64_t>(config.data.seed), config.data.shuffle))
      global.push_back(train_set[i]);
    RankPrompts prompts = rank_prompts(global, *tokenizer, config, d.dispatch_block, context.world_size(),
                                       context.rank(), config.parallel.pad_to_world);
    actor.update_sft(sft_batch(prompts, *tokenizer, config.data.max_response_length), d.actor_mini_batches, context, m);
    auto metrics = m.reduce(context);
    metrics["training/global_step"] = static_cast<double>(step);
    const bool last = step == total;
    if (config.trainer.test_freq > 0 && (step % config.trainer.test_freq == 0 || last)) {
      OnDevice on(actor.placement());
      for (const auto& [k, v] : evaluate(actor.model(), val_set, *task, *tokenizer, config, context)) metrics[k] = v;
    }
    run_dir.append_metrics(nlohmann::json(metrics));
    if (context.is_root() && logger_enabled(config.trainer, "console") &&
        (step % std::max<int64_t>(1, config.trainer.log_freq) == 0 || last)) {
      std::printf("sft step %lld/%lld | loss %.4f", static_cast<long long>(step), static_cast<long long>(total),
                  metrics["sft/loss"]);
      const std::string val = "val/" + task->name() + "/acc/mean";
      if (metrics.count(val)) std::printf(" | val acc %.3f", metrics[val]);
      std::printf("\n");
      std::fflush(stdout);
    }
    if (config.trainer.write_checkpoints &&
        (last || (config.trainer.save_freq > 0 && step % config.trainer.save_freq == 0)))
      run_dir.save_checkpoint(
          step,
          [&](const std::string& dir) {
            actor.save(dir);
            write_json_file(dir + "/trainer_state.json", {{"global_step", step}, {"kind", "sft"}});
          },
          config.trainer.max_ckpt_to_keep);
  }
  if (context.is_root())
    std::printf("sft checkpoint: %s/checkpoints/global_step_%lld\n", run_dir.path().c_str(),
                static_cast<long long>(total));
  return 0;
}

int run_eval(Config& config, const std::string& checkpoint) {
  Context& context = Context::get();
  // Only validation generation runs: the training batch relations do not apply.
  usage_check(config.data.val_batch_size >= 1, "data.val_batch_size must be at least 1");
  auto task = make_task(config.data.task);
  auto tokenizer = make_tokenizer(config.model.tokenizer);
  auto val_set = load_prompts(config, *task, false);
  Config model_config = config;
  model_config.actor.init_checkpoint = checkpoint.empty() ? config.actor.init_checkpoint : checkpoint;
  Actor actor(model_config, vocab_size_for(config, *tokenizer), false, 0, context.device());
  OnDevice on(actor.placement());
  ValMetrics val = evaluate(actor.model(), val_set, *task, *tokenizer, config, context);
  if (context.is_root()) {
    std::printf("eval of %s on %zu %s prompts (%s decoding)\n",
                model_config.actor.init_checkpoint.empty() ? "the seeded initialisation"
                                                           : model_config.actor.init_checkpoint.c_str(),
                val_set.size(), task->name().c_str(), config.rollout.val_temperature > 0 ? "sampled" : "greedy");
    print_val_table(val, val_set, task->name());
  }
  return 0;
}

int run_generate(Config& config, int64_t count) {
  Context& context = Context::get();
  // Only generation runs: the training batch relations do not apply (sampling settings are checked by generate()).
  usage_check(config.rollout.n >= 1, "rollout.n must be at least 1");
  usage_check(count >= 1, "--count must be at least 1");
  auto task = make_task(config.data.task);
  auto tokenizer = make_tokenizer(config.model.tokenizer);
  auto samples = load_prompts(config, *task, false);
  samples.resize(std::min<size_t>(samples.size(), static_cast<size_t>(count)));
  Actor actor(config, vocab_size_for(config, *tokenizer), false, 0, context.device());
  OnDevice on(actor.placement());
  RankPrompts prompts = rank_prompts(samples, *tokenizer, config, static_cast<int64_t>(samples.size()), 1, 0, false);
  const RolloutConfig& r = config.rollout;
  Batch batch = rollout_generate(actor.model(), *tokenizer, prompts, {r.n, r.temperature, r.top_k, r.top_p, 0}, config);
  reward_compute(batch, prompts, r.n, *task, *tokenizer);
  if (!context.is_root()) return 0;
  for (int64_t b = 0; b < batch.size(); ++b) {
    std::printf("prompt:   %s\nresponse: %s\nreward:   %.3f%s\n\n", prompts.samples[b / r.n].prompt.c_str(),
                response_text(batch, b, *tokenizer).c_str(), batch.at("scores")[b].item<double>(),
                batch.at("correct")[b].item<double>() > 0 ? " (correct)" : "");
  }
  return 0;
}

}  // namespace ppo
