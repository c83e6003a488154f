// ppo sft: supervised warm-start on the task's reference answers (cross-entropy on the response tokens).
#include "train/sft.h"

#include <cstdio>
#include <iostream>

#include "common/error.h"
#include "records/run_dir.h"
#include "rollout/rollout.h"
#include "train/config_check.h"
#include "train/evaluate.h"
#include "train/prompts.h"
#include "train/schedule.h"
#include "workers/actor.h"

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
  Batch batch = sequence_batch(input_ids, attention, P, response_mask, sample_mask);
  return batch;
}

SftSteps::SftSteps(Run& run)
    : WorkerSteps(run.context(), &TrainerState::actor_optimizer_steps),
      run_(run),
      config_(run.config()),
      context_(run.context()),
      in_(run.inputs()) {
  for (const TaskSample& s : in_.train_set)
    usage_check(!s.answer.empty(), (s.origin.empty() ? "prompt " + std::to_string(s.index) : s.origin) +
                                       ": no answer to train on (a veRL record carries it in extra_info.answer)");
  const RunShape& d = run_.shape();
  const int64_t total = run.schedule().total_steps();
  worker_ = Actor::policy(config_, vocab_size_for(config_, *in_.tokenizer), total * d.actor_mini_batches,
                          context_.device(), d.actor_micro_batch_size);
  if (context_.is_root()) {
    for (const std::string& note : d.notes) std::cout << "note: " << note << "\n";
    std::cout << "sft: " << worker_->state().parameter_count() << " parameters, " << total << " steps of "
              << config_.data.train_batch_size << " prompts; run directory: " << run.run_dir().path() << "\n";
  }
}

std::map<std::string, double> SftSteps::step(int64_t step) {
  Metrics m;
  const RankPrompts prompts = step_prompts(run_.schedule(), step, in_.train_set, *in_.tokenizer, config_, context_);
  worker_->update_sft(sft_batch(prompts, *in_.tokenizer, config_.data.max_response_length),
                      run_.shape().actor_mini_batches, context_, m);
  m.add_max("memory/model_state_mib", static_cast<double>(worker_->state().model_state_bytes()) / (1 << 20));
  std::map<std::string, double> metrics = m.reduce(context_);
  metrics["training/global_step"] = static_cast<double>(step);
  return metrics;
}

ValMetrics SftSteps::validate(int64_t step) {
  WorkerState::Phase phase(worker_->state(), /*whole_model=*/true);
  return evaluate(worker_->model(), in_.val_set, *in_.rewarder, *in_.tokenizer, config_, context_,
                  in_.environment.get());
}

std::string SftSteps::progress(const std::map<std::string, double>& metrics) const {
  char text[64];
  std::snprintf(text, sizeof text, "loss %.4f", metrics.count("sft/loss") ? metrics.at("sft/loss") : 0.0);
  return text;
}

void SftSteps::summarize() {
  std::printf("sft checkpoint: %s/checkpoints/global_step_%lld\n", run_.run_dir().path().c_str(),
              static_cast<long long>(run_.schedule().total_steps()));
}

int run_sft(const Config& config) {
  return fit_run<SftSteps>(config, RunMode::sft);
}

}  // namespace ppo
