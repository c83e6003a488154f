// ppo export: a checkpoint's policy (merged, or its PEFT adapter) or a ppo rm checkpoint's reward model as a Hugging
// Face folder, written beside --out and renamed into place.
#pragma once

#include "app/command_config.h"

namespace ppo {

int run_export_command(CommandArgs& a);
void export_options(cxxopts::Options& o);

}  // namespace ppo
