// ppo sft: supervised warm-start on the task's reference answers (cross-entropy on the response tokens).
#include "train/sft.h"

#include <cstdio>
#include <iostream>

#include "actor/actor.h"
#include "common/error.h"
#include "rollout/rollout.h"
#include "train/evaluate.h"
#include "train/prompts.h"
#include "train/run_dir.h"
#include "train/schedule.h"
#include "train/validate.h"

namespace ppo {

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
  batch.set(field::input_ids, input_ids);
  batch.set(field::attention_mask, attention);
  batch.set(field::position_ids, position_ids_from_mask(attention));
  batch.set(field::prompts, input_ids.slice(1, 0, P).clone());
  batch.set(field::responses, input_ids.slice(1, P, P + R).clone());
  batch.set(field::response_mask, response_mask);
  batch.set(field::sample_mask, sample_mask);
  return batch;
}

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
  auto train_set = load_prompts(config, *task, *tokenizer, true);
  auto val_set = load_prompts(config, *task, *tokenizer, false);
  for (const TaskSample& s : train_set)
    usage_check(!s.answer.empty(), (s.origin.empty() ? "prompt " + std::to_string(s.index) : s.origin) +
                                       ": no answer to train on (a veRL record carries it in extra_info.answer)");
  Rewarder rewarder(config.reward, task->name(), context.rank(), context.world_size());
  rewarder.check(val_set);
  const std::string val_source = data_sources(val_set, rewarder).front();
  const StepSchedule schedule(config, static_cast<int64_t>(train_set.size()));
  const int64_t total = schedule.total_steps();
  const Derived& d = config.derived;
  Actor actor(config, vocab_size_for(config, *tokenizer), true, total * d.actor_mini_batches, context.device());
  RunDir run_dir(config.trainer.output_dir, context.is_root(), config.trainer.logger);
  run_dir.archive_metrics();
  run_dir.write_config(config);
  if (context.is_root()) {
    for (const std::string& note : d.notes) std::cout << "note: " << note << "\n";
    std::cout << "sft: " << parameter_count(*actor.model()) << " parameters, " << total << " steps of "
              << config.data.train_batch_size << " prompts; run directory: " << run_dir.path() << "\n";
  }
  for (int64_t step = 1; step <= total; ++step) {
    Metrics m;
    const RankPrompts prompts = step_prompts(schedule, step, train_set, *tokenizer, config, context);
    actor.update_sft(sft_batch(prompts, *tokenizer, config.data.max_response_length), d.actor_mini_batches, context, m);
    auto metrics = m.reduce(context);
    metrics["training/global_step"] = static_cast<double>(step);
    const bool last = schedule.is_last(step);
    if (schedule.validates_at(step)) {
      OnDevice on(actor.placement());
      for (const auto& [k, v] : evaluate(actor.model(), val_set, rewarder, *tokenizer, config, context)) metrics[k] = v;
    }
    run_dir.append_metrics(nlohmann::json(metrics));
    if (context.is_root() && logger_enabled(config.trainer, "console") &&
        (step % std::max<int64_t>(1, config.trainer.log_freq) == 0 || last)) {
      std::printf("sft step %lld/%lld | loss %.4f", static_cast<long long>(step), static_cast<long long>(total),
                  metrics["sft/loss"]);
      const std::string val = "val/" + val_source + "/acc/mean";
      if (metrics.count(val)) std::printf(" | val acc %.3f", metrics[val]);
      std::printf("\n");
      std::fflush(stdout);
    }
    if (schedule.saves_at(step))
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

}  // namespace ppo
