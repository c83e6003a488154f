// The subcommand table of `ppo` and the small commands that need no trainer.
#include "app/commands.h"

#include <iostream>

#include "common/config.h"
#include "common/error.h"
#include "parallel/context.h"

namespace ppo {
namespace {

int run_config(CommandArgs& a) {
  Config config = load_config(a.config_files, a.overrides);
  validate(config, Context::get().world_size());
  if (Context::get().is_root()) std::cout << config_to_yaml(config, a.args.count("comments") > 0);
  return 0;
}

}  // namespace

std::vector<Command> all_commands() {
  std::vector<Command> commands;
  commands.push_back({"config", "print the fully resolved config (YAML) and exit", true,
                      [](cxxopts::Options& o) {
                        o.add_options()("comments", "add each key's meaning as a comment (as configs/ppo_trainer.yaml)");
                      },
                      run_config});
  return commands;
}

}  // namespace ppo
