// ppo regress: the learning regression suite on small models. Every advantage estimator the config offers (gae,
// grpo, rloo, reinforce_plus_plus and the Dr. GRPO and clip-higher variants) trains a tiny model from its seeded
// initialisation on each toy task (reverse, digit_sum), each case a `ppo train` child process with fixed seeds and
// one thread. Each case's score curve (critic/score/mean per step) is compared with a reference curve stored in the
// repository (tests/regress/reference.json): its final-window mean (the last fifth of the steps) and its area under
// the curve (the mean over all steps) must lie within the reference file's tolerance bands. A change in either
// direction fails: a better curve is a change that should be re-recorded on purpose (--update).
//
// Writes <out>/report.md (task x estimator x final score, AUC and validation accuracy against the reference, and
// the verdict), <out>/curves_<task>.svg (each estimator's curve beside its dashed reference) and each case's run
// directory <out>/<task>/<estimator>/ (log.txt, metrics.jsonl). Exit status 0 when every case passes, 1 naming each
// regression, 2 on bad usage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ppo {

struct RegressCase {
  std::string task, estimator;
  std::vector<std::string> overrides;  // the `ppo train` key=value list of this case
  std::string name() const { return task + "/" + estimator; }
};

// The full matrix, or the quick subset the ctest suite runs (reverse x gae, grpo).
std::vector<RegressCase> regress_cases(bool quick);

// What a curve is judged by: the mean of its last fifth (at least one step) and the mean of all of it.
struct CurveSummary {
  double final_mean = 0, auc = 0;
};
CurveSummary summarize_curve(const std::vector<double>& curve);

struct RegressOptions {
  bool quick = false, update = false;
  int64_t jobs = 2;
  std::string out = "runs/regress";
  std::string reference = "tests/regress/reference.json";
  std::string only;    // run only cases whose name contains this text (empty = all)
  std::string binary;  // the ppo binary to run (empty = this process's own executable)
  // Config files and key=value overrides given to every case after its own (e.g. to try a change of a default).
  std::vector<std::string> config_files, extra_overrides;
};

// Runs the suite; returns the exit status (0 pass, 1 regressions). UsageError on bad options or reference file.
int run_regress(const RegressOptions& options);

}  // namespace ppo
