// The run directory: resolved config, metrics.jsonl, checkpoints/global_step_N/ (written under a temporary name and
// renamed when complete) and checkpoints/latest_checkpointed_iteration.txt. Only rank 0 writes.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/config.h"

namespace ppo {

class RunDir {
 public:
  RunDir(const std::string& path, bool is_root);
  const std::string& path() const { return path_; }
  std::string checkpoints() const { return path_ + "/checkpoints"; }
  void write_config(Config& config) const;
  // Appends one metrics object (a line) to metrics.jsonl.
  void append_metrics(const nlohmann::json& metrics) const;
  // Keeps the metric lines of steps <= step; later lines (from a run that went past its last checkpoint) move to
  // metrics.orphaned.jsonl, so nothing written is lost.
  void truncate_metrics_after(int64_t step) const;
  // Moves an existing metrics.jsonl aside (fresh run in a used directory).
  void archive_metrics() const;

  // The checkpoint folder to resume from: resume_mode auto (latest here, or none), disable (none) or a path.
  // A path that is not a checkpoint is a UsageError.
  std::string resume_path(const std::string& resume_mode) const;
  // Creates checkpoints/global_step_N.tmp, lets `write` fill it, then renames it and updates the latest file;
  // keeps at most `keep` checkpoints (0 = all).
  void save_checkpoint(int64_t step, const std::function<void(const std::string& dir)>& write, int64_t keep) const;

 private:
  std::string path_;
  bool is_root_;
};

nlohmann::json read_json_file(const std::string& path);
void write_json_file(const std::string& path, const nlohmann::json& value);

}  // namespace ppo
