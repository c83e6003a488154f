// What a subcommand is given (its flags, config files and overrides) and the config every subcommand loads from them.
#pragma once

// cxxopts splits the values of a repeated positional option at this character; its default ',' would cut list
// overrides such as trainer.logger=[console,tensorboard] in two. No key=value holds a NUL. Every file of app/ gets
// cxxopts through this header, so all see the same definition.
#define CXXOPTS_VECTOR_DELIMITER '\0'
#include <cxxopts.hpp>
#include <string>
#include <vector>

#include "common/config.h"

namespace ppo {

struct CommandArgs {
  cxxopts::ParseResult& args;             // the subcommand's own flags
  std::vector<std::string> config_files;  // --config, in order
  std::vector<std::string> overrides;     // key.path=value
};

// A subcommand's layered config, with the shape of model.path's config.json when that is set (model/hf.h); applies
// the process settings every command shares (parallel.backend, timeout_s and check_collectives,
// trainer.num_threads) and checks that every rank was given the same config and files.
Config command_config(CommandArgs& a);

}  // namespace ppo
