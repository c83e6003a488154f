// The task registry (make_task, task_names) and the data files a run reads and writes: JSONL, or Parquet
// (tasks/parquet.h), of a task's own records or veRL's layout (tasks/verl_record.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tasks/task.h"

namespace ppo {

// UsageError "data.task: unknown task 'x'; valid: digit_sum, kk, reverse".
std::unique_ptr<Task> make_task(const std::string& name);
std::vector<std::string> task_names();  // sorted

// Data files: JSONL (one record per line) or Parquet (a path ending in ".parquet", tasks/parquet.h), their records
// read alike. Errors are UsageError "file:line: problem" (bad JSON, missing field; "file: row N: problem" in Parquet,
// rows counted from 0) or "file: cannot open ...". Blank lines are skipped; a record without "index" gets its position
// among the loaded samples. A record with a "reward_model" field is read as veRL's layout (tasks/verl_record.h, the
// prompt from `prompt_key`), any other with task.from_json; every sample gets its origin ("path:line", "path: row N"),
// and a task record the task's name as data_source.
std::vector<TaskSample> load_samples(const Task& task, const std::string& path,
                                     const std::string& prompt_key = "prompt");
// JSONL of task.to_json records, or, for a path ending in ".parquet", Parquet of task.to_verl records.
void write_samples(const Task& task, const std::vector<TaskSample>& samples, const std::string& path);
void write_jsonl(const Task& task, const std::vector<TaskSample>& samples, const std::string& path);

// Responses for `ppo score`: one JSON object per line with a string field "response".
std::vector<std::string> load_responses_jsonl(const std::string& path);

}  // namespace ppo
