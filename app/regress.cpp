// See app/regress.h.
#include "app/regress.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "common/config.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "records/plot.h"
#include "records/run_dir.h"
#include "train/config_check.h"

namespace ppo {
namespace {

namespace fs = std::filesystem;

// Every case: the tiny model of configs/regression_tiny.yaml, 150 steps of 16 prompts x 4 responses from the seeded
// initialisation (pure RL: no warm start), one thread so that a case is the same on any machine.
const std::vector<std::string> kCommon = {"data.min_difficulty=2",
                                          "data.max_difficulty=3",
                                          "data.train_batch_size=16",
                                          "data.val_batch_size=32",
                                          "data.val_size=32",
                                          "model.hidden_size=64",
                                          "model.num_layers=2",
                                          "model.num_heads=4",
                                          "model.num_kv_heads=2",
                                          "model.intermediate_size=128",
                                          "model.max_position_embeddings=32",
                                          "actor.ppo_mini_batch_size=8",
                                          "actor.ppo_micro_batch_size_per_gpu=32",
                                          "actor.optim.lr=0.001",
                                          "critic.ppo_mini_batch_size=8",
                                          "critic.ppo_micro_batch_size_per_gpu=32",
                                          "critic.optim.lr=0.001",
                                          "rollout.n=4",
                                          "trainer.total_training_steps=150",
                                          "trainer.test_freq=50",
                                          "trainer.val_before_train=true",
                                          "trainer.num_threads=1",
                                          "trainer.resume_mode=disable",
                                          "trainer.logger=[console,jsonl]"};

struct TaskSpec {
  std::string name;
  std::vector<std::string> overrides;
};
const std::vector<TaskSpec> kTasks = {
    {"reverse", {"data.task=reverse", "data.max_prompt_length=8", "data.max_response_length=6"}},
    {"digit_sum", {"data.task=digit_sum", "data.max_prompt_length=8", "data.max_response_length=4"}}};

struct EstimatorSpec {
  std::string name;
  std::vector<std::string> overrides;
};
const std::vector<EstimatorSpec> kEstimators = {
    {"gae", {"algorithm.adv_estimator=gae"}},
    {"grpo", {"algorithm.adv_estimator=grpo"}},
    {"rloo", {"algorithm.adv_estimator=rloo"}},
    {"reinforce_plus_plus", {"algorithm.adv_estimator=reinforce_plus_plus"}},
    // Dr. GRPO (Liu et al. 2025, arXiv:2503.20783): no division by the group std, a constant length normaliser.
    {"dr_grpo",
     {"algorithm.adv_estimator=grpo", "algorithm.norm_adv_by_std_in_grpo=false",
      "actor.loss_agg_mode=seq-mean-token-sum-norm"}},
    // DAPO's clip-higher (Yu et al. 2025, arXiv:2503.14476): a wider upper clip, 0.28 against 0.2.
    {"clip_higher", {"algorithm.adv_estimator=grpo", "actor.clip_ratio_low=0.2", "actor.clip_ratio_high=0.28"}},
    {"reinforce_plus_plus_baseline", {"algorithm.adv_estimator=reinforce_plus_plus_baseline"}},
    {"grpo_passk", {"algorithm.adv_estimator=grpo_passk"}},
    // GSPO (Zheng et al. 2025, arXiv:2507.18071) with the paper's clip range (3e-4, 4e-4) and aggregation.
    {"gspo",
     {"algorithm.adv_estimator=grpo", "actor.policy_loss.loss_mode=gspo", "actor.clip_ratio_low=0.0003",
      "actor.clip_ratio_high=0.0004", "actor.loss_agg_mode=seq-mean-token-mean"}},
    // CISPO (MiniMax-M1, arXiv:2506.13585): no lower bound on the weight (low = 1), the upper one tuned (0.28).
    {"cispo",
     {"algorithm.adv_estimator=grpo", "actor.policy_loss.loss_mode=cispo", "actor.clip_ratio_low=1.0",
      "actor.clip_ratio_high=0.28"}}};

std::string fixed(double v, int digits = 3) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// The path of this process's executable, so that the children are the same build.
std::string own_executable() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  usage_check(!ec, "ppo regress: cannot find its own executable (/proc/self/exe); pass --binary");
  return exe.string();
}

// Starts `binary args...` with stdout and stderr going to `log`; returns the child's pid.
pid_t spawn(const std::string& binary, const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("ppo regress: fork failed");
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

// The run folder of a case: <out>/<task>/<estimator>.
std::string case_dir(const RegressOptions& o, const RegressCase& c) {
  return o.out + "/" + c.name();
}

// Runs every case, at most `jobs` at a time; returns each case's exit status (-1: killed by a signal).
std::vector<int> run_cases(const std::vector<RegressCase>& cases, const RegressOptions& o, const std::string& binary) {
  std::vector<int> status(cases.size(), -1);
  std::map<pid_t, size_t> running;
  size_t next = 0;
  while (next < cases.size() || !running.empty()) {
    while (next < cases.size() && static_cast<int64_t>(running.size()) < o.jobs) {
      const RegressCase& c = cases[next];
      const std::string dir = case_dir(o, c);
      ppo::remove_tree(dir);
      fs::create_directories(dir);
      std::vector<std::string> args = {"train"};
      for (const std::string& file : o.config_files) args.insert(args.end(), {"--config", file});
      args.insert(args.end(), c.overrides.begin(), c.overrides.end());
      args.insert(args.end(), o.extra_overrides.begin(), o.extra_overrides.end());
      args.push_back("trainer.output_dir=" + dir);
      running[spawn(binary, args, dir + "/log.txt")] = next;
      std::printf("started %s\n", c.name().c_str());
      ++next;
    }
    int child_status = 0;
    const pid_t pid = waitpid(-1, &child_status, 0);
    if (pid < 0) throw std::runtime_error("ppo regress: waitpid failed");
    const auto it = running.find(pid);
    if (it == running.end()) continue;
    status[it->second] = WIFEXITED(child_status) ? WEXITSTATUS(child_status) : -1;
    std::printf("finished %s (exit %d)\n", cases[it->second].name().c_str(), status[it->second]);
    std::fflush(stdout);
    running.erase(it);
  }
  return status;
}

struct Outcome {
  RunCurves curves;
  CurveSummary summary;
  double val_acc = std::nan("");
  bool ran = false;
};

// The reference file: {"tolerance": {"final": F, "auc": A}, "cases": {name: {"score": [...], "final", "auc",
// "val_acc", ...}}}.
nlohmann::json load_reference(const std::string& path, bool may_be_missing) {
  if (!fs::exists(path)) {
    usage_check(may_be_missing,
                "ppo regress: no reference file " + path + " (record one with --update, or pass --reference FILE)");
    return {{"tolerance", {{"final", 0.08}, {"auc", 0.05}}}, {"cases", nlohmann::json::object()}};
  }
  nlohmann::json ref;
  try {
    ref = read_json_file(path);
    usage_check(ref.at("tolerance").at("final").is_number() && ref.at("tolerance").at("auc").is_number() &&
                    ref.at("cases").is_object(),
                "wrong types");
  } catch (const std::exception& e) {
    throw UsageError(path + ": not a regress reference file (tolerance.final, tolerance.auc, cases): " + e.what());
  }
  return ref;
}

// ": <the first error: line of a child's log>", or "" when it has none.
std::string first_error_line(const std::string& log) {
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("error: ", 0) == 0) return ": " + line;
  return "";
}

std::vector<double> numbers(const nlohmann::json& array) {
  std::vector<double> out;
  for (const auto& v : array) out.push_back(v.is_number() ? v.get<double>() : std::nan(""));
  return out;
}

}  // namespace

std::vector<RegressCase> regress_cases(bool quick) {
  std::vector<RegressCase> cases;
  for (const TaskSpec& t : kTasks)
    for (const EstimatorSpec& e : kEstimators) {
      if (quick && (t.name != "reverse" || (e.name != "gae" && e.name != "grpo"))) continue;
      RegressCase c{t.name, e.name, kCommon};
      c.overrides.insert(c.overrides.end(), t.overrides.begin(), t.overrides.end());
      c.overrides.insert(c.overrides.end(), e.overrides.begin(), e.overrides.end());
      cases.push_back(c);
    }
  return cases;
}

CurveSummary summarize_curve(const std::vector<double>& curve) {
  CurveSummary s;
  if (curve.empty()) return s;
  const size_t window = std::max<size_t>(1, curve.size() / 5);
  for (size_t i = 0; i < curve.size(); ++i) {
    s.auc += curve[i];
    if (i >= curve.size() - window) s.final_mean += curve[i];
  }
  s.auc /= static_cast<double>(curve.size());
  s.final_mean /= static_cast<double>(window);
  return s;
}

namespace {

// The cases --quick and --only select, each config checked before any starts (one error line for a bad override),
// and each case's folder either free or an earlier run of that case (it is replaced).
std::vector<RegressCase> checked_cases(const RegressOptions& o) {
  std::vector<RegressCase> cases;
  for (const RegressCase& c : regress_cases(o.quick))
    if (o.only.empty() || c.name().find(o.only) != std::string::npos) cases.push_back(c);
  usage_check(!cases.empty(), "ppo regress: --only '" + o.only + "' matches no case");
  for (const RegressCase& c : cases) {
    std::vector<std::string> overrides = c.overrides;
    overrides.insert(overrides.end(), o.extra_overrides.begin(), o.extra_overrides.end());
    try {
      Config config = load_config(o.config_files, overrides);
      check_config(config, 1);
    } catch (const UsageError& e) {
      throw UsageError("ppo regress, case " + c.name() + ": " + e.what());
    }
    const std::string dir = case_dir(o, c);
    std::error_code error;
    usage_check(!fs::exists(dir, error) || fs::is_empty(dir, error) || fs::exists(dir + "/config.yaml", error),
                "ppo regress --out " + o.out + ": " + dir + " exists and is not a run of this case (no config.yaml); " +
                    "it would be replaced, so choose another --out");
  }
  return cases;
}

// Each finished case's curves and summary.
std::vector<Outcome> outcomes_of(const std::vector<RegressCase>& cases, const std::vector<int>& status,
                                 const RegressOptions& o) {
  std::vector<Outcome> outcomes(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    if (status[i] != 0) continue;
    Outcome& out = outcomes[i];
    out.curves = read_run_curves(case_dir(o, cases[i]) + "/metrics.jsonl", cases[i].task);
    out.summary = summarize_curve(out.curves.score);
    if (!out.curves.val_acc.empty()) out.val_acc = out.curves.val_acc.back();
    out.ran = true;
  }
  return outcomes;
}

// A case's verdict against its reference: pass, recorded (--update), a failure to run, or a change outside the bands.
std::string verdict_of(const Outcome& out, const nlohmann::json* ref, const RegressOptions& o, int status,
                       const std::string& log, double tol_final, double tol_auc) {
  if (!out.ran) return "FAILED: exit " + std::to_string(status) + ", see " + log + first_error_line(log);
  if (o.update) return "recorded";
  if (!ref) return "NO REFERENCE (record with --update)";
  const double df = out.summary.final_mean - (*ref)["final"].get<double>();
  const double da = out.summary.auc - (*ref)["auc"].get<double>();
  if (std::abs(df) <= tol_final && std::abs(da) <= tol_auc) return "pass";
  return std::string(df < -tol_final || da < -tol_auc ? "REGRESSION" : "CHANGED (above the band)") + ": final " +
         fixed(df, 3) + " (band +-" + fixed(tol_final, 2) + "), AUC " + fixed(da, 3) + " (band +-" + fixed(tol_auc, 2) +
         ")";
}

// The markdown table of every case against its reference; the failures are added to `failures`.
std::string verdict_table(const std::vector<RegressCase>& cases, const std::vector<Outcome>& outcomes,
                          const std::vector<int>& status, nlohmann::json& reference, const RegressOptions& o,
                          std::vector<std::string>& failures) {
  const double tol_final = reference["tolerance"]["final"].get<double>();
  const double tol_auc = reference["tolerance"]["auc"].get<double>();
  std::ostringstream table;
  table << "| task | estimator | final score | reference | AUC | reference | val acc | reference | verdict |\n"
        << "|---|---|---|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < cases.size(); ++i) {
    const RegressCase& c = cases[i];
    const Outcome& out = outcomes[i];
    const nlohmann::json* ref = reference["cases"].contains(c.name()) ? &reference["cases"][c.name()] : nullptr;
    const std::string verdict = verdict_of(out, ref, o, status[i], case_dir(o, c) + "/log.txt", tol_final, tol_auc);
    if (verdict != "pass" && verdict != "recorded") failures.push_back(c.name() + ": " + verdict);
    auto ref_text = [&](const char* key) {
      return ref && (*ref).contains(key) && (*ref)[key].is_number() ? fixed((*ref)[key].get<double>()) : "-";
    };
    table << "| " << c.task << " | " << c.estimator << " | " << (out.ran ? fixed(out.summary.final_mean) : "-") << " | "
          << ref_text("final") << " | " << (out.ran ? fixed(out.summary.auc) : "-") << " | " << ref_text("auc") << " | "
          << (out.ran && std::isfinite(out.val_acc) ? fixed(out.val_acc) : "-") << " | " << ref_text("val_acc") << " | "
          << verdict << " |\n";
  }
  return table.str();
}

// One chart per task: each estimator's score curve, its reference dashed in the same colour. Returns the files.
std::vector<std::string> write_charts(const std::vector<RegressCase>& cases, const std::vector<Outcome>& outcomes,
                                      const nlohmann::json& reference, const RegressOptions& o) {
  std::vector<std::string> charts;
  for (const TaskSpec& t : kTasks) {
    PlotPanel panel{t.name + ": training score (critic/score/mean)", "step", {}};
    int color = -1;
    for (size_t i = 0; i < cases.size(); ++i) {
      if (cases[i].task != t.name) continue;
      ++color;
      panel.series.push_back({cases[i].estimator, outcomes[i].curves.steps, outcomes[i].curves.score, false, color});
      if (reference["cases"].contains(cases[i].name())) {
        const std::vector<double> ref = numbers(reference["cases"][cases[i].name()]["score"]);
        std::vector<double> steps(ref.size());
        for (size_t s = 0; s < ref.size(); ++s) steps[s] = static_cast<double>(s + 1);
        panel.series.push_back({"(ref)", steps, ref, true, color});
      }
    }
    if (panel.series.empty()) continue;
    const std::string path = o.out + "/curves_" + t.name + ".svg";
    write_svg_chart(path, {panel});
    charts.push_back(path);
  }
  return charts;
}

// --update: the cases' curves become the references, written only when every case ran.
void write_references(const std::vector<RegressCase>& cases, const std::vector<Outcome>& outcomes,
                      nlohmann::json& reference, const RegressOptions& o, bool all_ran) {
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!outcomes[i].ran) continue;
    nlohmann::json curve = nlohmann::json::array();
    for (double v : outcomes[i].curves.score) curve.push_back(std::round(v * 1e4) / 1e4);
    reference["cases"][cases[i].name()] = {
        {"final", outcomes[i].summary.final_mean},
        {"auc", outcomes[i].summary.auc},
        {"val_acc", std::isfinite(outcomes[i].val_acc) ? nlohmann::json(outcomes[i].val_acc) : nlohmann::json()},
        {"score", curve}};
  }
  if (!all_ran) return void(std::printf("references NOT written: some cases failed to run\n"));
  fs::path parent = fs::path(o.reference).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  write_file_atomic(o.reference, reference.dump(1) + "\n");
  std::printf("references written: %s\n", o.reference.c_str());
}

void write_report(const RegressOptions& o, size_t cases, const nlohmann::json& reference, const std::string& table,
                  const std::vector<std::string>& charts) {
  std::ostringstream report;
  report << "# ppo regress\n\n"
         << cases << " case(s); reference " << o.reference << " (tolerance: final-window mean +-"
         << fixed(reference["tolerance"]["final"].get<double>(), 2) << ", AUC +-"
         << fixed(reference["tolerance"]["auc"].get<double>(), 2)
         << "). Final score: mean critic/score/mean over the last fifth of the steps; AUC: its mean over all steps; "
            "val acc: greedy validation accuracy at the last step.\n\n"
         << table << "\n";
  for (const std::string& chart : charts)
    report << "![" << chart << "](" << fs::path(chart).filename().string() << ")\n";
  write_file_atomic(o.out + "/report.md", report.str());
}

}  // namespace

int run_regress(const RegressOptions& o) {
  usage_check(o.jobs >= 1, "ppo regress: --jobs must be at least 1");
  usage_check(!std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("PMI_SIZE") && !std::getenv("PMIX_RANK"),
              "ppo regress runs its cases as processes of its own: start it without mpirun (--jobs sets how many "
              "run at once)");
  const std::vector<RegressCase> cases = checked_cases(o);
  nlohmann::json reference = load_reference(o.reference, o.update);
  const std::string binary = o.binary.empty() ? own_executable() : o.binary;
  fs::create_directories(o.out);
  std::printf("ppo regress: %zu case(s), %lld at a time, in %s; reference %s\n", cases.size(),
              static_cast<long long>(o.jobs), o.out.c_str(), o.reference.c_str());
  const std::vector<int> status = run_cases(cases, o, binary);
  const std::vector<Outcome> outcomes = outcomes_of(cases, status, o);
  std::vector<std::string> failures;
  const std::string table = verdict_table(cases, outcomes, status, reference, o, failures);
  const std::vector<std::string> charts = write_charts(cases, outcomes, reference, o);
  if (o.update)
    write_references(cases, outcomes, reference, o,
                     std::all_of(outcomes.begin(), outcomes.end(), [](const Outcome& out) { return out.ran; }));
  write_report(o, cases.size(), reference, table, charts);
  std::printf("\n%s\nreport: %s/report.md\n", table.c_str(), o.out.c_str());
  for (const std::string& chart : charts) std::printf("curves: %s\n", chart.c_str());
  for (const std::string& f : failures) std::printf("regression: %s\n", f.c_str());
  if (!failures.empty()) std::printf("%zu of %zu case(s) failed\n", failures.size(), cases.size());
  return failures.empty() ? 0 : 1;
}

}  // namespace ppo
