// libFuzzer target for the JSONL readers (tasks/task.cpp, tasks/kk_task.cpp, tasks/verl_record.cpp): the input is a
// JSONL file, read by load_samples for every registered task (records in the task's layout or in veRL's), by
// load_responses_jsonl and by load_preference_pairs (whose pairs must have their origin, two different non-empty
// responses and a finite margin). Each read must either succeed or throw ppo::UsageError. The samples read are then
// scored with their own reference answer and with the responses (scores must lie in the task's range), and a file of
// task records written back by write_jsonl must read back as the same samples. Any other exception, crash, sanitizer
// report or failed check is a bug. Built and run by scripts/fuzz.sh (`bash scripts/fuzz.sh build 30 jsonl`).
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/jsonl.h"
#include "tasks/datasets.h"
#include "tasks/preference_pairs.h"
#include "tasks/task.h"
#include "tasks/verl_record.h"

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_jsonl: %s\n", what.c_str());
  std::abort();
}

// A file holding `text`, as the readers take paths: one memfd per slot and process, rewritten for every input,
// reached as /proc/self/fd/N (no disk, nothing left behind).
std::string file_with(int slot, const std::string& text) {
  static int fds[2] = {-1, -1};
  int& fd = fds[slot];
  if (fd < 0) fd = memfd_create("fuzz_jsonl", 0);
  if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    finding("cannot write the input to a memfd");
  return "/proc/self/fd/" + std::to_string(fd);
}

// Whether any record of the file is in veRL's layout (those are not written back by write_jsonl).
bool has_verl_record(const std::string& path) {
  bool verl = false;
  try {
    ppo::for_each_jsonl_record(
        path, [&](const nlohmann::json& record, int64_t) { verl = verl || ppo::is_verl_record(record); });
  } catch (const ppo::UsageError&) {
  }
  return verl;
}

// Scores `response`; a UsageError (a ground truth the task cannot score, e.g. a veRL record's) is allowed, a score
// outside the task's range is not.
void check_score(const ppo::Task& task, const ppo::TaskSample& sample, const std::string& response) {
  ppo::Score score;
  try {
    score = task.score(sample, response);
  } catch (const ppo::UsageError&) {
    return;
  }
  const bool kk = task.name() == "kk";
  const double low = kk ? -3.0 : 0.0, high = kk ? 3.0 : 1.0;
  if (!(score.score >= low && score.score <= high))
    finding(task.name() + ": score " + std::to_string(score.score) + " outside [" + std::to_string(low) + ", " +
            std::to_string(high) + "] for " + sample.origin);
  // (reverse gives an exact answer less than 1 when it is not all digits: 0.2 of its score is for digits)
  if (score.correct && task.name() != "reverse" && score.score != high)
    finding(task.name() + ": a correct response scored below the maximum");
}

void check_same(const ppo::TaskSample& a, const ppo::TaskSample& b, const std::string& task) {
  if (a.prompt != b.prompt || a.answer != b.answer || a.ground_truth != b.ground_truth ||
      a.difficulty != b.difficulty || a.index != b.index || a.messages != b.messages ||
      a.response_prefix != b.response_prefix || a.data_source != b.data_source)
    finding(task + ": write_jsonl -> load_samples changed the sample of " + a.origin + ": " + task + " record " +
            nlohmann::json{{"prompt", a.prompt}, {"answer", a.answer}, {"ground_truth", a.ground_truth}}.dump() +
            " read back as " +
            nlohmann::json{{"prompt", b.prompt}, {"answer", b.answer}, {"ground_truth", b.ground_truth}}.dump());
}

// ppo rm's reader: its pairs or a UsageError.
void check_pairs(const std::string& path) {
  std::vector<ppo::PreferencePair> pairs;
  try {
    pairs = ppo::load_preference_pairs(path, {});
  } catch (const ppo::UsageError&) {
    return;
  }
  for (const ppo::PreferencePair& pair : pairs) {
    if (pair.prompt.origin.rfind(path + ":", 0) != 0) finding("pairs: a pair without its origin path:line");
    if (pair.chosen.empty() || pair.rejected.empty() || pair.chosen == pair.rejected)
      finding("pairs: " + pair.prompt.origin + " has an empty response or the same one twice");
    if (!std::isfinite(pair.margin)) finding("pairs: " + pair.prompt.origin + " has a margin that is not finite");
    if (!pair.prompt.prompt_is_chat && pair.prompt.prompt.empty())
      finding("pairs: " + pair.prompt.origin + " has an empty prompt");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = file_with(0, std::string(reinterpret_cast<const char*>(data), size));
  check_pairs(path);
  std::vector<std::string> responses;
  try {
    responses = ppo::load_responses_jsonl(path);
  } catch (const ppo::UsageError&) {
  }
  const bool verl = has_verl_record(path);
  for (const std::string& name : ppo::task_names()) {
    const std::unique_ptr<ppo::Task> task = ppo::make_task(name);
    std::vector<ppo::TaskSample> samples;
    try {
      samples = ppo::load_samples(*task, path);
    } catch (const ppo::UsageError&) {
      continue;
    }
    for (size_t i = 0; i < samples.size(); ++i) {
      if (samples[i].origin.rfind(path + ":", 0) != 0) finding(name + ": sample without its origin path:line");
      check_score(*task, samples[i], samples[i].answer);
      if (i < responses.size()) check_score(*task, samples[i], responses[i]);
    }
    if (responses.size() == samples.size()) {
      try {
        ppo::score_responses(*task, samples, responses);
      } catch (const ppo::UsageError&) {
      }
    }
    if (verl) continue;
    // Task records only: to_json is the inverse of from_json.
    const std::string written = file_with(1, "");
    ppo::write_jsonl(*task, samples, written);
    const std::vector<ppo::TaskSample> again = ppo::load_samples(*task, written);
    if (again.size() != samples.size()) finding(name + ": write_jsonl -> load_samples changed the sample count");
    for (size_t i = 0; i < samples.size(); ++i) check_same(samples[i], again[i], name);
  }
  return 0;
}
