// The task registry and the data files (see datasets.h).
#include "tasks/datasets.h"

#include <fstream>

#include "common/jsonl.h"
#include "common/strings.h"
#include "tasks/kk.h"
#include "tasks/parquet.h"
#include "tasks/verl_record.h"

namespace ppo {

// ---------------------------------------------------------------------------------------------------------------
// Registry.

std::vector<std::string> task_names() {
  return {"digit_sum", "kk", "reverse"};
}

std::unique_ptr<Task> make_task(const std::string& name) {
  if (std::unique_ptr<Task> toy = make_toy_task(name)) return toy;
  if (name == "kk") return std::make_unique<KkTask>();
  throw UsageError("data.task: unknown task '" + name + "'; valid: " + join(task_names(), ", "));
}

// ---------------------------------------------------------------------------------------------------------------
// JSONL.

std::vector<TaskSample> load_samples(const Task& task, const std::string& path, const std::string& prompt_key) {
  std::vector<TaskSample> samples;
  const bool parquet = is_parquet_path(path);
  auto on_record = [&](const nlohmann::json& record, int64_t position) {
    const bool verl = is_verl_record(record);
    TaskSample s = verl ? verl_sample(record, prompt_key) : task.from_json(record);
    if (!verl && !record.contains("index")) s.index = static_cast<int64_t>(samples.size());
    if (verl && s.index < 0) s.index = static_cast<int64_t>(samples.size());
    if (!verl) s.data_source = task.name();
    s.origin = path + (parquet ? ": row " : ":") + std::to_string(position);
    samples.push_back(std::move(s));
  };
  if (parquet)
    for_each_parquet_record(path, on_record);
  else
    for_each_jsonl_record(path, on_record);
  return samples;
}

void write_samples(const Task& task, const std::vector<TaskSample>& samples, const std::string& path) {
  if (!is_parquet_path(path)) return write_jsonl(task, samples, path);
  std::vector<nlohmann::json> records;
  records.reserve(samples.size());
  for (const TaskSample& s : samples) records.push_back(task.to_verl(s));
  write_parquet(records, path);
}

void write_jsonl(const Task& task, const std::vector<TaskSample>& samples, const std::string& path) {
  std::ofstream out(path);
  usage_check(out.good(), path + ": cannot open for writing");
  for (const TaskSample& s : samples) out << task.to_json(s).dump() << '\n';
  out.flush();
  usage_check(out.good(), path + ": write error");
}

std::vector<std::string> load_responses_jsonl(const std::string& path) {
  std::vector<std::string> responses;
  for_each_jsonl_record(path, [&](const nlohmann::json& record, int64_t) {
    responses.push_back(json_field<std::string>(record, "response"));
  });
  return responses;
}

}  // namespace ppo
