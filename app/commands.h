// The subcommands of `ppo`, each a name, a one-line summary and a function.
#pragma once

// cxxopts splits the values of a repeated positional option at this character; its default ',' would cut list
// overrides such as trainer.logger=[console,tensorboard] in two. No key=value holds a NUL. Every file of app/ gets
// cxxopts through this header, so all see the same definition.
#define CXXOPTS_VECTOR_DELIMITER '\0'
#include <cxxopts.hpp>
#include <functional>
#include <string>
#include <vector>

namespace ppo {

struct CommandArgs {
  cxxopts::ParseResult& args;             // the subcommand's own flags
  std::vector<std::string> config_files;  // --config, in order
  std::vector<std::string> overrides;     // key.path=value
};

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
