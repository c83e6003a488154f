#include "records/run_dir.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/manifest.h"
#include "common/strings.h"
#include "records/tracker.h"

namespace fs = std::filesystem;

namespace ppo {

void write_json_file(const std::string& path, const nlohmann::json& value) {
  write_file_atomic(path, value.dump(2) + "\n");
}

const std::vector<std::string>& logger_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all = {"console", "jsonl", "tensorboard"};
    all.insert(all.end(), tracker_names().begin(), tracker_names().end());
    return all;
  }();
  return names;
}

bool logger_enabled(const TrainerConfig& trainer, const std::string& name) {
  return std::find(trainer.logger.begin(), trainer.logger.end(), name) != trainer.logger.end();
}

RunDir::RunDir(const std::string& path, bool is_root, const std::vector<std::string>& loggers)
    : path_(path), is_root_(is_root) {
  for (size_t i = 0; i < loggers.size(); ++i) {
    const auto& names = logger_names();
    usage_check(std::find(names.begin(), names.end(), loggers[i]) != names.end(),
                "trainer.logger: unknown logger '" + loggers[i] + "'; valid: " + join(names, ", "));
    usage_check(std::find(loggers.begin(), loggers.begin() + i, loggers[i]) == loggers.begin() + i,
                "trainer.logger lists '" + loggers[i] + "' twice");
  }
  // The trackers' companions follow metrics.jsonl (records/tracker.h), so it is written whenever one is on.
  jsonl_ = std::any_of(loggers.begin(), loggers.end(), [](const std::string& l) {
    const auto& trackers = tracker_names();
    return l == "jsonl" || std::find(trackers.begin(), trackers.end(), l) != trackers.end();
  });
  tensorboard_ = std::find(loggers.begin(), loggers.end(), "tensorboard") != loggers.end();
  if (!is_root_) return;
  std::error_code error;
  fs::create_directories(path_, error);
  usage_check(!error, "trainer.output_dir=" + path_ + " cannot be created: " + error.message());
  const bool writable = ::access(path_.c_str(), W_OK | X_OK) == 0;
  const int access_error = errno;  // read before the message is built
  usage_check(writable, "trainer.output_dir=" + path_ + " is not writable: " + std::strerror(access_error));
}

std::vector<std::string> RunDir::event_files() const {
  std::vector<std::string> files;
  if (!fs::is_directory(path_)) return files;
  for (const auto& entry : fs::directory_iterator(path_))
    if (entry.is_regular_file() && entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

void RunDir::write_config(const Config& config) const {
  if (!is_root_) return;
  write_file_atomic(path_ + "/config.yaml", config_to_yaml(config));
}

void RunDir::append_metrics(const nlohmann::json& metrics) {
  if (!is_root_) return;
  if (jsonl_)
    append_file(path_ + "/metrics.jsonl",
                metrics.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  if (!tensorboard_) return;
  if (!events_) {  // append to the run's newest event file (a resumed run), or start one
    const std::vector<std::string> existing = event_files();
    events_ =
        std::make_unique<EventFileWriter>(existing.empty() ? path_ + "/" + new_event_file_name() : existing.back());
  }
  std::map<std::string, double> scalars;
  for (const auto& [key, value] : metrics.items())
    if (value.is_number() || value.is_null())
      scalars[key] = value.is_null() ? std::numeric_limits<double>::quiet_NaN() : value.get<double>();
  const double step = metrics.value("training/global_step", 0.0);
  events_->add(static_cast<int64_t>(step), scalars);
}

void RunDir::truncate_metrics_after(int64_t step) const {
  if (!is_root_) return;
  truncate_events_after(step);
  const std::string file = path_ + "/metrics.jsonl";
  if (!fs::exists(file)) return;
  check_regular_file(file);
  std::ifstream in(file);
  std::string kept, orphaned;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const std::optional<nlohmann::json> j = try_parse_json_bounded(line);
    const nlohmann::json* at = j && j->is_object() ? &*j : nullptr;
    const nlohmann::json logged = at ? at->value("training/global_step", nlohmann::json(0.0)) : nlohmann::json();
    const bool keep = logged.is_number() && logged.get<double>() <= static_cast<double>(step);
    (keep ? kept : orphaned) += line + "\n";
  }
  in.close();
  if (orphaned.empty()) return;
  append_file(path_ + "/metrics.orphaned.jsonl", orphaned);  // first, so a kill in between loses nothing
  write_file_atomic(file, kept);
}

void RunDir::truncate_events_after(int64_t step) const {
  for (const std::string& file : event_files()) {
    std::string kept, orphaned;
    for (const EventRecord& r : read_event_file(file))
      (r.file_version || r.step <= step ? kept : orphaned) += tf_record(r.data);
    if (orphaned.empty()) continue;
    fs::create_directories(path_ + "/orphaned");
    const std::string moved = path_ + "/orphaned/" + fs::path(file).filename().string();
    append_file(moved,
                (fs::exists(moved) && fs::file_size(moved) > 0 ? "" : tf_record(event_file_version(0.0))) + orphaned);
    write_file_atomic(file, kept);
  }
}

void RunDir::archive_metrics() const {
  const std::string file = path_ + "/metrics.jsonl";
  const std::vector<std::string> events = event_files();
  // What belongs to the earlier run besides its metrics and checkpoints: its config (which `ppo export` of one of
  // its checkpoints reads beside them), its curves, what it set aside when it resumed, and its tracked runs' ids.
  std::vector<std::string> belongings;
  for (const char* name : {"config.yaml", "curves.svg", "metrics.orphaned.jsonl", "orphaned", "tracking"})
    if (fs::exists(fs::symlink_status(path_ + "/" + name))) belongings.push_back(name);
  if (!is_root_ || (!fs::exists(file) && events.empty() && !fs::exists(checkpoints()) && belongings.empty())) return;
  const auto previous = [&](int i) { return path_ + "/metrics.previous-" + std::to_string(i) + ".jsonl"; };
  const auto previous_dir = [&](int i) { return path_ + "/previous-" + std::to_string(i); };
  int i = 1;
  // Names nothing holds, not even a dangling link.
  while (fs::exists(fs::symlink_status(previous(i))) || fs::exists(fs::symlink_status(previous_dir(i)))) ++i;
  if (fs::exists(file)) fs::rename(file, previous(i));
  if (!events.empty() || fs::exists(checkpoints()) || !belongings.empty()) fs::create_directories(previous_dir(i));
  for (const std::string& e : events) fs::rename(e, previous_dir(i) + "/" + fs::path(e).filename().string());
  // The earlier run's checkpoints: this run's pruning must not mix them with its own.
  if (fs::exists(checkpoints())) fs::rename(checkpoints(), previous_dir(i) + "/checkpoints");
  for (const std::string& name : belongings) fs::rename(path_ + "/" + name, previous_dir(i) + "/" + name);
}

void RunDir::orphan_checkpoints_after(int64_t step) const {
  if (!is_root_) return;
  const std::vector<int64_t> steps = checkpoint_steps();
  const std::string orphaned = path_ + "/orphaned";
  const fs::file_status status = fs::symlink_status(orphaned);
  usage_check(std::none_of(steps.begin(), steps.end(), [&](int64_t s) { return s > step; }) || !fs::exists(status) ||
                  fs::is_directory(status),
              orphaned + " is not a folder: the checkpoints after step " + std::to_string(step) +
                  " are set aside there on resume; move it away");
  for (int64_t later : steps)
    if (later > step) {
      fs::create_directories(path_ + "/orphaned/checkpoints");
      const std::string name = "global_step_" + std::to_string(later), orphans = path_ + "/orphaned/checkpoints/";
      std::string target = orphans + name;  // an earlier orphan of the same step keeps its name: this one gets -2, ...
      for (int i = 2; fs::exists(fs::symlink_status(target)); ++i) target = orphans + name + "-" + std::to_string(i);
      fs::rename(checkpoints() + "/" + name, target);
    }
}

std::vector<int64_t> RunDir::checkpoint_steps() const {
  std::vector<int64_t> steps;
  if (!fs::is_directory(checkpoints())) return steps;
  for (const auto& entry : fs::directory_iterator(checkpoints())) {
    const std::string n = entry.path().filename().string();
    if (!entry.is_directory() || n.rfind("global_step_", 0) != 0) continue;
    const std::string digits = n.substr(12);
    if (!digits.empty() && digits.size() < 16 && digits.find_first_not_of("0123456789") == std::string::npos)
      steps.push_back(std::stoll(digits));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string RunDir::resume_path(const std::string& mode) const {
  if (mode == "disable") return "";
  if (mode == "auto") {
    const std::string latest = checkpoints() + "/latest_checkpointed_iteration.txt";
    if (!fs::exists(latest)) return "";
    std::istringstream in(read_regular_file(latest));
    int64_t step = -1;
    in >> step;
    if (!in) step = -1;
    const std::string dir = checkpoints() + "/global_step_" + std::to_string(step);
    usage_check(step >= 0 && fs::exists(dir + "/trainer_state.json"),
                latest + " points to step " + std::to_string(step) + ", but " + dir +
                    " is not a complete checkpoint; set trainer.resume_mode=disable or a checkpoint path");
    return dir;
  }
  usage_check(fs::exists(mode + "/trainer_state.json"),
              "trainer.resume_mode=" + mode +
                  " is not a checkpoint folder (no trainer_state.json); valid: auto, "
                  "disable, or a path like runs/x/checkpoints/global_step_10");
  return mode;
}

void RunDir::save_checkpoint(int64_t step, const std::function<void(const std::string&)>& write, int64_t keep,
                             const std::function<std::string(const std::string&)>& share,
                             const std::function<void()>& all_written) const {
  const std::string name = "global_step_" + std::to_string(step);
  const std::string final_dir = checkpoints() + "/" + name;
  std::string tmp;
  if (is_root_) {
    fs::create_directories(checkpoints());
    // Leftovers of a save of this step that was killed (checkpoints/ is the run's own folder).
    for (const auto& entry : fs::directory_iterator(checkpoints()))
      if (entry.path().filename().string().rfind(name + ".tmp", 0) == 0) ppo::remove_tree(entry.path());
    tmp = make_temp_dir(final_dir);
  }
  tmp = share(tmp);
  try {
    write(tmp);
    all_written();
    if (!is_root_) return;
    write_manifest(tmp);
  } catch (const IoError& e) {
    // Any rank: the one whose write failed (a ZeRO part) ends the job before the others get here.
    std::error_code ignored;
    ppo::remove_tree(tmp, ignored);
    const std::string latest = checkpoints() + "/latest_checkpointed_iteration.txt";
    throw IoError(std::string(e.what()) + "; the checkpoint of step " + std::to_string(step) + " was not written" +
                  (fs::exists(latest) ? " (" + latest + " still names the last complete one)" : ""));
  }
  ppo::remove_tree(final_dir);
  fs::rename(tmp, final_dir);
  write_file_atomic(checkpoints() + "/latest_checkpointed_iteration.txt", std::to_string(step) + "\n");
  if (keep <= 0) return;
  const std::vector<int64_t> steps = checkpoint_steps();  // this run's (archive_metrics, orphan_checkpoints_after)
  for (size_t i = 0; i + keep < steps.size(); ++i)
    ppo::remove_tree(checkpoints() + "/global_step_" + std::to_string(steps[i]));
}

}  // namespace ppo
