// The experiment trackers of trainer.logger (wandb, mlflow): one companion process each, started by rank 0, that
// follows metrics.jsonl and logs it through the tracker's own Python client (scripts/ppo_track.py, run by the Python
// of the tracking environment .venv-track). The trainer never waits on a companion: one that cannot start, or exits
// with an error, is a warning with its reason, once, and training goes on; metrics.jsonl stays the record. The
// tracked run's id lives in the run folder (tracking/<tracker>.json), so a resumed run continues it; how the
// tracked run ended is tracking/<tracker>.closed, removed as a run starts.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/config.h"

namespace ppo {

// The trainer.logger names that are trackers.
const std::vector<std::string>& tracker_names();

// `ppo track`: the companion run once over `run_dir` (what it holds now), its output ours; returns its exit status.
// UsageError when the script or its Python cannot be started.
int track_once(const TrainerConfig& trainer, const std::string& tracker, const std::string& run_dir);

class Trackers {
 public:
  // Starts a companion for each tracker in trainer.logger (on the root rank only), its output in
  // run_dir/tracking/<tracker>.log. Never throws for a tracker: a failure is a warning.
  Trackers(const TrainerConfig& trainer, const std::string& run_dir, bool is_root);
  // Writes run_dir/tracking/trainer_exit (0, or 1 while an exception unwinds), which tells the companions to log
  // the rest and close the run; does not wait for them.
  ~Trackers();
  Trackers(const Trackers&) = delete;
  Trackers& operator=(const Trackers&) = delete;

  // Warns, once each, of a companion that has exited with an error (the last line of its log). Cheap: no wait.
  void check();

 private:
  struct Companion {
    std::string name;
    pid_t pid = -1;  // -1 once it has exited
  };
  std::string run_dir_;
  std::vector<Companion> companions_;
};

}  // namespace ppo
