// The run directory: resolved config, metrics (metrics.jsonl and TensorBoard event files, as trainer.logger says),
// checkpoints/global_step_N/ (written under a temporary name and renamed when complete) and
// checkpoints/latest_checkpointed_iteration.txt. Only rank 0 writes.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "records/tensorboard.h"

namespace ppo {

// The valid trainer.logger names: console, jsonl, tensorboard, and the trackers wandb and mlflow.
const std::vector<std::string>& logger_names();
// Whether trainer.logger lists `name`.
bool logger_enabled(const TrainerConfig& trainer, const std::string& name);

class RunDir {
 public:
  // `loggers`: trainer.logger; an unknown or repeated name is a UsageError listing the valid ones.
  RunDir(const std::string& path, bool is_root, const std::vector<std::string>& loggers = {"jsonl"});
  const std::string& path() const { return path_; }
  // Whether metrics.jsonl is written: logger jsonl, or a tracker (records/tracker.h), which follows it.
  bool writes_jsonl() const { return jsonl_; }
  std::string checkpoints() const { return path_ + "/checkpoints"; }
  void write_config(const Config& config) const;
  // Logs one metrics object at its "training/global_step": a line of metrics.jsonl (logger jsonl) and an event of
  // the run's TensorBoard event file (logger tensorboard; null values are written as NaN).
  void append_metrics(const nlohmann::json& metrics);
  // Keeps the metrics of steps <= step; later ones (from a run that went past its last checkpoint) move to
  // metrics.orphaned.jsonl and to an event file under orphaned/, so nothing written is lost, and the run's own
  // files read as one history when it resumes.
  void truncate_metrics_after(int64_t step) const;
  // A fresh run in a used directory: moves an existing metrics.jsonl to metrics.previous-<i>.jsonl, and the event
  // files, checkpoints/, config.yaml, curves.svg, tracking/ and what that run orphaned to previous-<i>/, so this run's
  // checkpoints are the only ones it prunes, and an earlier checkpoint keeps the config beside it (`ppo export`).
  void archive_metrics() const;
  // A run resumed at `step`: moves checkpoints of later steps (a run that went on past it) to orphaned/checkpoints/.
  void orphan_checkpoints_after(int64_t step) const;
  // The steps of the complete checkpoints under checkpoints/, ascending.
  std::vector<int64_t> checkpoint_steps() const;

  // The checkpoint folder to resume from: resume_mode auto (latest here, or none), disable (none) or a path.
  // A path that is not a checkpoint is a UsageError.
  std::string resume_path(const std::string& resume_mode) const;
  // Every rank calls it. Rank 0 creates checkpoints/global_step_N.tmp-XXXXXX and `share` hands its name to every
  // rank (rank 0's argument is returned everywhere); each rank's `write` fills it (a sharded state has every rank write
  // its part; the others write only on rank 0) and `all_written` waits for every rank. Rank 0 then writes the
  // manifest, renames the folder, updates the latest file and keeps at most `keep` checkpoints (0 = all).
  void save_checkpoint(int64_t step, const std::function<void(const std::string& dir)>& write, int64_t keep,
                       const std::function<std::string(const std::string&)>& share,
                       const std::function<void()>& all_written) const;

 private:
  std::vector<std::string> event_files() const;  // events.out.tfevents.* directly in the run directory, sorted
  void truncate_events_after(int64_t step) const;

  std::string path_;
  bool is_root_;
  bool jsonl_ = false, tensorboard_ = false;
  std::unique_ptr<EventFileWriter> events_;  // opened at the first logged step
};

void write_json_file(const std::string& path, const nlohmann::json& value);

}  // namespace ppo
