// ppo track: a finished (or offline) run folder's metrics, config, validation table and curves logged to an
// experiment tracker, continuing the run's tracked run when it has one (records/tracker.h).
#pragma once

#include "app/command_config.h"

namespace ppo {

int run_track_command(CommandArgs& a);
void track_options(cxxopts::Options& o);

}  // namespace ppo
