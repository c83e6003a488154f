// See app/command_config.h.
#include "app/command_config.h"

#include "common/manifest.h"
#include "model/hf_config.h"
#include "parallel/context.h"
#include "train/rank_agreement.h"

namespace ppo {

Config command_config(CommandArgs& a) {
  Config config = load_config(a.config_files, a.overrides);
  resolve_model_path(config.model);
  accept_checkpoints_without_manifest(config.trainer.accept_checkpoints_without_manifest);
  Context::get().set_backend(config.parallel.backend);
  Context::get().set_timeout(config.parallel.timeout_s);
  Context::get().set_check_collectives(config.parallel.check_collectives);
  Context::get().set_threads(config.trainer.num_threads);
  check_ranks_agree(config, Context::get());
  return config;
}

}  // namespace ppo
