#include "rl/checkpoint.h"

#include <filesystem>
#include <fstream>

#include "common/error.h"

namespace fs = std::filesystem;

namespace ppo {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read " + path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(path + ": not valid JSON (" + e.what() + ")");
  }
}

void write_json_file(const std::string& path, const nlohmann::json& value) {
  std::ofstream out(path);
  out << value.dump(2) << "\n";
  if (!out) throw std::runtime_error("cannot write " + path);
}

RunDir::RunDir(const std::string& path, bool is_root) : path_(path), is_root_(is_root) {
  if (is_root_) fs::create_directories(path_);
}

void RunDir::write_config(Config& config) const {
  if (!is_root_) return;
  std::ofstream(path_ + "/config.yaml") << config_to_yaml(config);
}

void RunDir::append_metrics(const nlohmann::json& metrics) const {
  if (!is_root_) return;
  std::ofstream out(path_ + "/metrics.jsonl", std::ios::app);
  out << metrics.dump() << "\n";
}

void RunDir::truncate_metrics_after(int64_t step) const {
  const std::string file = path_ + "/metrics.jsonl";
  if (!is_root_ || !fs::exists(file)) return;
  std::ifstream in(file);
  std::string kept, orphaned;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    bool keep = !j.is_discarded() && j.value("training/global_step", 0.0) <= static_cast<double>(step);
    (keep ? kept : orphaned) += line + "\n";
  }
  in.close();
  if (!orphaned.empty()) std::ofstream(path_ + "/metrics.orphaned.jsonl", std::ios::app) << orphaned;
  std::ofstream(file, std::ios::trunc) << kept;
}

void RunDir::archive_metrics() const {
  const std::string file = path_ + "/metrics.jsonl";
  if (!is_root_ || !fs::exists(file)) return;
  int i = 1;
  while (fs::exists(path_ + "/metrics.previous-" + std::to_string(i) + ".jsonl")) ++i;
  fs::rename(file, path_ + "/metrics.previous-" + std::to_string(i) + ".jsonl");
}

std::string RunDir::resume_path(const std::string& mode) const {
  if (mode == "disable") return "";
  if (mode == "auto") {
    const std::string latest = checkpoints() + "/latest_checkpointed_iteration.txt";
    if (!fs::exists(latest)) return "";
    std::ifstream in(latest);
    int64_t step = -1;
    in >> step;
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

void RunDir::save_checkpoint(int64_t step, const std::function<void(const std::string&)>& write, int64_t keep) const {
  if (!is_root_) return;
  const std::string name = "global_step_" + std::to_string(step);
  const std::string final_dir = checkpoints() + "/" + name, tmp = final_dir + ".tmp";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  write(tmp);
  fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  const std::string latest = checkpoints() + "/latest_checkpointed_iteration.txt";
  std::ofstream(latest + ".tmp") << step << "\n";
  fs::rename(latest + ".tmp", latest);
  if (keep <= 0) return;
  std::vector<int64_t> steps;
  for (const auto& entry : fs::directory_iterator(checkpoints())) {
    const std::string n = entry.path().filename().string();
    if (entry.is_directory() && n.rfind("global_step_", 0) == 0 && n.find(".tmp") == std::string::npos)
      steps.push_back(std::stoll(n.substr(12)));
  }
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; i + keep < steps.size(); ++i)
    fs::remove_all(checkpoints() + "/global_step_" + std::to_string(steps[i]));
}

}  // namespace ppo
