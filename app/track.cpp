// See app/track.h.
#include "app/track.h"

#include <filesystem>

#include "common/config.h"
#include "common/error.h"
#include "common/strings.h"
#include "records/tracker.h"

namespace ppo {

int run_track_command(CommandArgs& a) {
  const std::vector<std::string>& names = tracker_names();
  usage_check(a.args.count("to") == 1, "ppo track needs --to TRACKER: " + join(names, " or "));
  const std::string tracker = a.args["to"].as<std::string>();
  usage_check(std::find(names.begin(), names.end(), tracker) != names.end(),
              "--to " + tracker + ": valid: " + join(names, ", "));
  usage_check(a.args.count("run-dir") == 1,
              "ppo track needs the run folder, e.g. ppo track --to " + tracker + " runs/kk_ppo");
  const std::string run_dir = a.args["run-dir"].as<std::string>();
  usage_check(std::filesystem::is_regular_file(run_dir + "/metrics.jsonl"),
              run_dir + "/metrics.jsonl not found: give a run folder (trainer.output_dir) with trainer.logger jsonl");
  // The project and run name the run was given (its config.yaml), unless the flags say otherwise.
  Config config;
  if (std::filesystem::is_regular_file(run_dir + "/config.yaml")) config = load_config({run_dir + "/config.yaml"}, {});
  if (a.args.count("project")) config.trainer.project_name = a.args["project"].as<std::string>();
  if (a.args.count("name")) config.trainer.experiment_name = a.args["name"].as<std::string>();
  const int status = track_once(config.trainer, tracker, run_dir);
  usage_check(status == 0 || status == 1, "ppo track: the tracker ended with status " + std::to_string(status));
  return status;
}

void track_options(cxxopts::Options& o) {
  o.add_options()("to", "the tracker: wandb or mlflow", cxxopts::value<std::string>())(
      "run-dir", "the run folder (trainer.output_dir)", cxxopts::value<std::string>())(
      "project", "the project (default: the run's trainer.project_name)", cxxopts::value<std::string>())(
      "name", "the run's name (default: the run's trainer.experiment_name, else the folder's name)",
      cxxopts::value<std::string>());
}

}  // namespace ppo
