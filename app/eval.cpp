// ppo eval: the accuracy of a checkpoint on the validation prompts, by difficulty.
#include "app/eval.h"

#include <cstdio>

#include "common/error.h"
#include "common/strings.h"
#include "train/evaluate.h"
#include "train/prompts.h"
#include "train/run.h"
#include "workers/actor.h"

namespace ppo {

int run_eval(const Config& config, const std::string& checkpoint, int64_t samples_per_prompt) {
  Context& context = Context::get();
  RunInputs in = load_run_inputs(config, context, RunMode::generation);
  Config model_config = config;
  model_config.actor.init_checkpoint = checkpoint.empty() ? config.actor.init_checkpoint : checkpoint;
  const std::unique_ptr<Actor> actor =
      Actor::reference(model_config, vocab_size_for(config, *in.tokenizer), context.device());
  WorkerState::Phase phase(actor->state(), /*whole_model=*/true);
  const std::string what = model_source(model_config);
  check_logits_finite(actor->model(), in.val_set, *in.tokenizer, config, context.device(), "the model of " + what);
  ValMetrics val = evaluate(actor->model(), in.val_set, *in.rewarder, *in.tokenizer, config, context,
                            in.environment.get(), samples_per_prompt,
                            /*show_progress=*/true);
  if (!context.is_root()) return 0;
  const std::string sources = join(data_sources(in.val_set, *in.rewarder), "/");
  if (samples_per_prompt > 1)
    std::printf("eval of %s on %zu %s prompts (%lld samples each at temperature %g)\n", what.c_str(), in.val_set.size(),
                sources.c_str(), static_cast<long long>(samples_per_prompt),
                config.rollout.val_temperature > 0 ? config.rollout.val_temperature : config.rollout.temperature);
  else
    std::printf("eval of %s on %zu %s prompts (%s decoding)\n", what.c_str(), in.val_set.size(), sources.c_str(),
                config.rollout.val_temperature > 0 ? "sampled" : "greedy");
  print_val_table(val, in.val_set, *in.rewarder, samples_per_prompt);
  return 0;
}

}  // namespace ppo
