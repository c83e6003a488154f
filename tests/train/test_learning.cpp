// Learning that shows: README's default experiment solves its task, and `ppo regress` (the learning regression suite)
// passes against the stored reference curves and fails when learning is broken. Also the SVG charts they draw.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "app/regress.h"
#include "common/files.h"
#include "records/plot.h"
#include "tests/app/run_ppo.h"
#include "tests/paths.h"
#include "tests/temp_dir.h"

using ppo_test::count_lines;
using ppo_test::Result;
using ppo_test::run_ppo;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The number after `label` on the first line that starts with `label`.
double number_after(const std::string& text, const std::string& label) {
  const size_t at = text.find(label);
  REQUIRE(at != std::string::npos);
  return std::stod(text.substr(at + label.size()));
}

}  // namespace

TEST_CASE("svg_chart: one polyline per series, panels side by side, text escaped", "[cpu][plot]") {
  ppo::PlotPanel a{"score <a&b>", "step", {}};
  a.series.push_back({"train", {1, 2, 3}, {0.1, 0.5, 0.9}, false, 0});
  a.series.push_back({"ref", {1, 2, 3}, {0.2, 0.4, std::nan("")}, true, 0});  // the NaN point is skipped
  ppo::PlotPanel b{"acc", "step", {}};
  b.series.push_back({"one point", {5}, {0.5}, false, 1});
  const std::string svg = ppo::svg_chart({a, b});
  CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"920.0\"", 0) == 0);
  CHECK(count(svg, "<polyline") == 2);
  CHECK(count(svg, "<circle") == 1);
  CHECK(count(svg, "stroke-dasharray") == 2);  // the dashed series and its legend entry
  CHECK_THAT(svg, Catch::Contains("score &lt;a&amp;b&gt;"));
  // The ref polyline has two points: "x,y x,y ".
  const size_t ref = svg.find("stroke-dasharray=\"5,3\" points=\"");
  REQUIRE(ref != std::string::npos);
  const std::string points = svg.substr(ref + 31, svg.find('"', ref + 31) - ref - 31);
  CHECK(count(points, ",") == 2);
}

TEST_CASE("summarize_curve: final-window mean over the last fifth, AUC over all", "[cpu][plot]") {
  std::vector<double> curve;
  for (int i = 1; i <= 10; ++i) curve.push_back(i);
  const ppo::CurveSummary s = ppo::summarize_curve(curve);
  CHECK(s.final_mean == Approx(9.5));  // steps 9 and 10
  CHECK(s.auc == Approx(5.5));
  CHECK(ppo::summarize_curve({2.0}).final_mean == 2.0);
}

TEST_CASE("regress_cases: every estimator on two tasks, and the quick subset is part of them", "[cpu][learning]") {
  const auto all = ppo::regress_cases(false), quick = ppo::regress_cases(true);
  CHECK(all.size() == 20);
  CHECK(quick.size() == 2);
  for (const auto& q : quick) {
    bool found = false;
    for (const auto& c : all) found = found || (c.name() == q.name() && c.overrides == q.overrides);
    CHECK(found);
  }
}

// README's first command: a short SFT leaves the policy mostly wrong, PPO then solves the task. On one thread (the
// configs fix two), as ctest runs two tests at once: the bounds hold for either count, and two threads beside
// another test took 1.4x the time of one.
// [once]: README's first command builds this experiment against LibTorch 1.13, and scripts/test.sh runs it in that
// build only; the 2.11 build's learning is held by `ppo regress --quick` below.
TEST_CASE("the default experiment: SFT warm start <= 0.3, PPO ends >= 0.9 with a table and curves",
          "[cpu][learning][once]") {
  ppo_test::TempDir tmp;
  const std::string dir = tmp.sub("default_experiment");
  ppo::remove_tree(dir);
  Result sft = run_ppo("sft --config " + ppo_test::paths().source_dir +
                       "/configs/reverse_sft.yaml trainer.num_threads=1 trainer.output_dir=" + dir + "/sft");
  INFO(sft.output);
  REQUIRE(sft.status == 0);
  Result train = run_ppo("train --config " + ppo_test::paths().source_dir + "/configs/regression_tiny.yaml --config " +
                         ppo_test::paths().source_dir +
                         "/configs/reverse_ppo.yaml trainer.num_threads=1 trainer.output_dir=" + dir +
                         "/ppo actor.init_checkpoint=" + dir + "/sft/checkpoints/global_step_20");
  INFO(train.output);
  REQUIRE(train.status == 0);
  CHECK(number_after(train.output, "validation before training: acc ") <= 0.3);
  const size_t table = train.output.find("validation by difficulty");
  REQUIRE(table != std::string::npos);
  const std::string rows = train.output.substr(table);
  CHECK(count_lines(rows, "2 ") == 1);
  CHECK(count_lines(rows, "3 ") == 1);
  // "all   128 | <acc before> <acc after> | ...": the after column.
  std::istringstream all(rows.substr(rows.find("\nall") + 1));
  std::string label, bar;
  int64_t prompts = 0;
  double before = 0, after = 0;
  all >> label >> prompts >> bar >> before >> after;
  CHECK(prompts == 128);
  CHECK(before <= 0.3);
  CHECK(after >= 0.9);
  CHECK_THAT(train.output, Catch::Contains("curves (score and accuracy per step): " + dir + "/ppo/curves.svg"));
  std::ifstream svg(dir + "/ppo/curves.svg");
  std::string text((std::istreambuf_iterator<char>(svg)), {});
  CHECK(count(text, "<polyline") == 4);
}

// The ctest subset of `ppo regress`: the stored references pass; a run that cannot learn (lr 0) is named.
TEST_CASE("ppo regress --quick passes against the stored references and names a broken run", "[cpu][learning]") {
  ppo_test::TempDir tmp;
  const std::string reference = ppo_test::paths().source_dir + "/tests/regress/reference.json";
  Result r = run_ppo("regress --quick --reference " + reference + " --out " + tmp.sub("regress"));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(count(r.output, "| pass |") == 2);
  CHECK(std::filesystem::exists(tmp.sub("regress") + "/report.md"));
  CHECK(std::filesystem::exists(tmp.sub("regress") + "/curves_reverse.svg"));

  Result broken = run_ppo("regress --quick --only reverse/gae --reference " + reference + " --out " +
                          tmp.sub("regress_broken") + " actor.optim.lr=0");
  INFO(broken.output);
  CHECK(broken.status == 1);
  CHECK(count_lines(broken.output, "regression: reverse/gae: REGRESSION") == 1);
  CHECK_THAT(broken.output, Catch::Contains("1 of 1 case(s) failed"));

  // Bad input is refused before any case runs: one error line, exit status 2.
  for (const std::string& args :
       {std::string("regress --quick actor.optim.lrr=0.1"), std::string("regress --jobs 0"),
        std::string("regress --only nothing"), "regress --reference " + tmp.sub("no_reference.json")}) {
    Result bad = run_ppo(args + " --out " + tmp.sub("regress_bad"));
    INFO(args << "\n" << bad.output);
    CHECK(bad.status == 2);
    CHECK(count_lines(bad.output, "error: ") == 1);
    CHECK(count_lines(bad.output, "started ") == 0);
  }
}
