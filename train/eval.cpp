// ppo eval: the accuracy of a checkpoint on the validation prompts, by difficulty.
#include "train/eval.h"

#include <cstdio>

#include "actor/actor.h"
#include "common/error.h"
#include "train/evaluate.h"
#include "train/prompts.h"

namespace ppo {

int run_eval(Config& config, const std::string& checkpoint, int64_t samples_per_prompt) {
  Context& context = Context::get();
  // Only validation generation runs: the training batch relations do not apply.
  usage_check(config.data.val_batch_size >= 1, "data.val_batch_size must be at least 1");
  auto task = make_task(config.data.task);
  auto tokenizer = make_tokenizer(config.model.tokenizer);
  auto val_set = load_prompts(config, *task, *tokenizer, false);
  Rewarder rewarder(config.reward, task->name(), context.rank(), context.world_size());
  rewarder.check(val_set);
  Config model_config = config;
  model_config.actor.init_checkpoint = checkpoint.empty() ? config.actor.init_checkpoint : checkpoint;
  Actor actor(model_config, vocab_size_for(config, *tokenizer), false, 0, context.device());
  OnDevice on(actor.placement());
  const std::string what = model_source(model_config);
  check_logits_finite(actor.model(), val_set, *tokenizer, config, context.device(), "the model of " + what);
  ValMetrics val = evaluate(actor.model(), val_set, rewarder, *tokenizer, config, context, samples_per_prompt);
  if (context.is_root()) {
    std::string sources;
    for (const std::string& source : data_sources(val_set, rewarder)) sources += (sources.empty() ? "" : "/") + source;
    if (samples_per_prompt > 1)
      std::printf("eval of %s on %zu %s prompts (%lld samples each at temperature %g)\n", what.c_str(), val_set.size(),
                  sources.c_str(), static_cast<long long>(samples_per_prompt),
                  config.rollout.val_temperature > 0 ? config.rollout.val_temperature : config.rollout.temperature);
    else
      std::printf("eval of %s on %zu %s prompts (%s decoding)\n", what.c_str(), val_set.size(), sources.c_str(),
                  config.rollout.val_temperature > 0 ? "sampled" : "greedy");
    print_val_table(val, val_set, rewarder, samples_per_prompt);
  }
  return 0;
}

}  // namespace ppo
