// ppo generate: sample responses to validation prompts and print them with their rewards.
#include "app/generate.h"

#include <nlohmann/json.hpp>

#include <cstdio>

#include "common/error.h"
#include "common/utf8.h"
#include "train/evaluate.h"
#include "train/experience.h"
#include "train/prompts.h"
#include "train/run.h"
#include "workers/actor.h"

namespace ppo {

int run_generate(const Config& config, int64_t count, bool jsonl) {
  Context& context = Context::get();
  RunInputs in = load_run_inputs(config, context, RunMode::generation);
  usage_check(count >= 1, "--count must be at least 1");
  std::vector<TaskSample>& samples = in.val_set;
  samples.resize(std::min<size_t>(samples.size(), static_cast<size_t>(count)));
  const Tokenizer& tokenizer = *in.tokenizer;
  // At parallel.zero_stage=3 each rank builds and reads only its slices of the model, then the phase gathers it.
  const std::unique_ptr<Actor> actor =
      Actor::reference(config, vocab_size_for(config, tokenizer), context.device(), config.parallel.zero_stage);
  WorkerState::Phase phase(actor->state(), /*whole_model=*/true);
  check_logits_finite(actor->model(), samples, tokenizer, config, context.device(),
                      "the model of " + model_source(config));
  RankPrompts prompts = rank_prompts(samples, tokenizer, config, static_cast<int64_t>(samples.size()),
                                     /*world=*/1, /*rank=*/0, /*pad=*/false);
  const RolloutConfig& r = config.rollout;
  Batch batch =
      rollout_batch(actor->model(), tokenizer, prompts, {r.n, r.temperature, r.top_k, r.top_p, /*seed_index=*/0},
                    config, {false, {}, in.environment.get()});
  compute_rewards(batch, prompts, r.n, *in.rewarder, tokenizer);
  if (!context.is_root()) return 0;
  for (int64_t b = 0; b < batch.size(); ++b) {
    if (jsonl) {
      // log_prob: the response's summed log-probabilities as sampled (vLLM's cumulative_logprob).
      const double log_prob =
          (batch.at(field::rollout_log_probs)[b] * batch.at(field::response_mask)[b]).sum().item<double>();
      std::printf("%s\n", nlohmann::json{{"prompt", prompts.texts[b / r.n]},
                                         {"response", response_text(batch, b, tokenizer)},
                                         {"log_prob", log_prob},
                                         {"reward", batch.at(field::scores)[b].item<double>()},
                                         {"correct", batch.at(field::correct)[b].item<double>() > 0}}
                              .dump()
                              .c_str());
      continue;
    }
    std::printf("prompt:   %s\nresponse: %s\nreward:   %.3f%s\n\n", utf8_printable(prompts.texts[b / r.n]).c_str(),
                utf8_printable(response_text(batch, b, tokenizer)).c_str(), batch.at(field::scores)[b].item<double>(),
                batch.at(field::correct)[b].item<double>() > 0 ? " (correct)" : "");
  }
  return 0;
}

}  // namespace ppo
