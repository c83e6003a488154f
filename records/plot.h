// Line charts as hand-written SVG 1.1 (no plotting library): the trainer's curves.svg and ppo regress's report.
// A chart is one or more panels side by side; each panel has its own axes, auto-ranged over its series.
#pragma once

#include <string>
#include <vector>

namespace ppo {

struct PlotSeries {
  std::string name;
  std::vector<double> x, y;  // same length; non-finite points are skipped
  bool dashed = false;       // e.g. a stored reference curve
  int color = -1;            // index into a fixed palette; -1 = the series' position in its panel
};

struct PlotPanel {
  std::string title, x_label;
  std::vector<PlotSeries> series;
};

// The SVG text of `panels` side by side.
std::string svg_chart(const std::vector<PlotPanel>& panels);
// Writes svg_chart(panels) to `path`; UsageError when it cannot be written.
void write_svg_chart(const std::string& path, const std::vector<PlotPanel>& panels);

// One run's curves read back from its metrics.jsonl: the training batch's mean score and accuracy per step, and the
// validation accuracy and score at the steps that have them (step 0 = before training).
struct RunCurves {
  std::vector<double> steps, score, acc;
  std::vector<double> val_steps, val_acc, val_score;
};
RunCurves read_run_curves(const std::string& metrics_path, const std::string& task);

// The two panels a run's curves.svg shows: score (training batch mean, and validation) and accuracy.
std::vector<PlotPanel> run_curve_panels(const RunCurves& curves, const std::string& title);

}  // namespace ppo
