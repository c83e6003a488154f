// See rl/choices.h.
#include "rl/choices.h"

#include <string>

#include "rl/algorithms.h"
#include "rl/distillation.h"

namespace ppo {

KeyChoices variant_choices() {
  KeyChoices choices;
  for (const AdvEstimatorSpec& e : adv_estimators())
    choices["algorithm.adv_estimator"].push_back({e.name, std::string(e.help) + "; " + e.source});
  for (const PolicyLossSpec& l : policy_losses())
    choices["actor.policy_loss.loss_mode"].push_back({l.name, std::string(l.help) + "; " + l.source});
  for (const auto& [name, help] : distill_loss_modes()) choices["distillation.loss_mode"].push_back({name, help});
  return choices;
}

}  // namespace ppo
