// The subcommands of `ppo`, each a name, a one-line summary and a function.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "app/command_config.h"

namespace ppo {

struct Command {
  std::string name;
  std::string summary;
  bool uses_config = true;                             // takes --config and key=value overrides
  std::string positional = "overrides";                // what bare arguments are: overrides, or an option name
  std::function<void(cxxopts::Options&)> add_options;  // subcommand flags, may be empty
  std::function<int(CommandArgs&)> run;                // returns the exit status
};

std::vector<Command> all_commands();

}  // namespace ppo
