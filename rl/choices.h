// The rows of the registries by the config key that names them, for `ppo config --help` and `--comments`: the
// advantage estimators, the policy losses, distillation's loss modes.
#pragma once

#include "common/config_schema.h"

namespace ppo {

KeyChoices variant_choices();

}  // namespace ppo
