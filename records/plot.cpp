// See records/plot.h.
#include "records/plot.h"

#include "common/jsonl.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "common/error.h"

namespace ppo {
namespace {

constexpr double kPanelWidth = 460, kPanelHeight = 300;
constexpr double kLeft = 56, kRight = 16, kTop = 30, kBottom = 64;  // margins inside a panel
const char* const kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string tick_label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", std::abs(v) < 1e-12 ? 0.0 : v);
  return buf;
}

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `ticks` intervals over `span`.
double tick_step(double span, int ticks) {
  const double raw = span / ticks;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * power) return m * power;
  return 10 * power;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  // Empty -> [0, 1]; a single value -> a unit-wide range around it; else rounded out to whole tick steps.
  void finish() {
    if (lo > hi) lo = 0, hi = 1;
    if (hi - lo < 1e-9) lo -= 0.5, hi += 0.5;
    const double step = tick_step(hi - lo, 5);
    lo = std::floor(lo / step + 1e-9) * step;
    hi = std::ceil(hi / step - 1e-9) * step;
  }
};

void draw_panel(std::ostringstream& out, const PlotPanel& panel, double x0) {
  Range xr, yr;
  for (const PlotSeries& s : panel.series)
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i)
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) xr.add(s.x[i]), yr.add(s.y[i]);
  xr.finish();
  yr.finish();
  const double left = x0 + kLeft, right = x0 + kPanelWidth - kRight, top = kTop, bottom = kPanelHeight - kBottom;
  auto px = [&](double x) { return left + (x - xr.lo) / (xr.hi - xr.lo) * (right - left); };
  auto py = [&](double y) { return bottom - (y - yr.lo) / (yr.hi - yr.lo) * (bottom - top); };
  out << "<text x=\"" << num((left + right) / 2) << "\" y=\"18\" text-anchor=\"middle\" font-size=\"13\">"
      << escape(panel.title) << "</text>\n";
  const double ystep = tick_step(yr.hi - yr.lo, 5), xstep = tick_step(xr.hi - xr.lo, 5);
  for (double y = yr.lo; y <= yr.hi + ystep * 1e-6; y += ystep) {
    out << "<line x1=\"" << num(left) << "\" x2=\"" << num(right) << "\" y1=\"" << num(py(y)) << "\" y2=\""
        << num(py(y)) << "\" stroke=\"#e5e5e5\"/>\n";
    out << "<text x=\"" << num(left - 6) << "\" y=\"" << num(py(y) + 4) << "\" text-anchor=\"end\" font-size=\"11\">"
        << tick_label(y) << "</text>\n";
  }
  for (double x = xr.lo; x <= xr.hi + xstep * 1e-6; x += xstep)
    out << "<text x=\"" << num(px(x)) << "\" y=\"" << num(bottom + 16) << "\" text-anchor=\"middle\" font-size=\"11\">"
        << tick_label(x) << "</text>\n";
  out << "<rect x=\"" << num(left) << "\" y=\"" << num(top) << "\" width=\"" << num(right - left) << "\" height=\""
      << num(bottom - top) << "\" fill=\"none\" stroke=\"#444\"/>\n";
  out << "<text x=\"" << num((left + right) / 2) << "\" y=\"" << num(bottom + 32)
      << "\" text-anchor=\"middle\" font-size=\"11\">" << escape(panel.x_label) << "</text>\n";
  double legend_x = left;
  for (size_t k = 0; k < panel.series.size(); ++k) {
    const PlotSeries& s = panel.series[k];
    const std::string color = kPalette[(s.color >= 0 ? static_cast<size_t>(s.color) : k) % 10];
    const std::string dash = s.dashed ? " stroke-dasharray=\"5,3\"" : "";
    std::string points, first_x, first_y;
    size_t count = 0;
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      if (count++ == 0) first_x = num(px(s.x[i])), first_y = num(py(s.y[i]));
      points += num(px(s.x[i])) + "," + num(py(s.y[i])) + " ";
    }
    if (count == 1)  // one point: a dot, since a polyline of one point draws nothing
      out << "<circle cx=\"" << first_x << "\" cy=\"" << first_y << "\" r=\"3\" fill=\"" << color << "\"/>\n";
    else if (count > 1)
      out << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\"" << dash << " points=\"" << points
          << "\"/>\n";
    const double ly = kPanelHeight - 12;
    out << "<line x1=\"" << num(legend_x) << "\" x2=\"" << num(legend_x + 16) << "\" y1=\"" << num(ly - 4) << "\" y2=\""
        << num(ly - 4) << "\" stroke=\"" << color << "\" stroke-width=\"2\"" << dash << "/>\n";
    out << "<text x=\"" << num(legend_x + 20) << "\" y=\"" << num(ly) << "\" font-size=\"10\">" << escape(s.name)
        << "</text>\n";
    legend_x += 28 + 6.0 * static_cast<double>(s.name.size());
  }
}

}  // namespace

std::string svg_chart(const std::vector<PlotPanel>& panels) {
  const double width = kPanelWidth * static_cast<double>(std::max<size_t>(1, panels.size()));
  std::ostringstream out;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width) << "\" height=\"" << num(kPanelHeight)
      << "\" viewBox=\"0 0 " << num(width) << " " << num(kPanelHeight) << "\" font-family=\"sans-serif\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  for (size_t p = 0; p < panels.size(); ++p) draw_panel(out, panels[p], kPanelWidth * static_cast<double>(p));
  out << "</svg>\n";
  return out.str();
}

void write_svg_chart(const std::string& path, const std::vector<PlotPanel>& panels) {
  std::ofstream out(path);
  usage_check(out.good(), path + ": cannot open for writing");
  out << svg_chart(panels);
  out.flush();
  usage_check(out.good(), path + ": write error");
}

RunCurves read_run_curves(const std::string& metrics_path, const std::string& task) {
  RunCurves c;
  const std::string val = "val/" + task + "/";
  auto number = [](const nlohmann::json& line, const std::string& key) {
    const auto it = line.find(key);
    return it != line.end() && it->is_number() ? it->get<double>() : std::numeric_limits<double>::quiet_NaN();
  };
  for_each_jsonl_record(metrics_path, [&](const nlohmann::json& line, int64_t) {
    const double step = number(line, "training/global_step");
    if (!std::isfinite(step)) return;
    if (line.contains("critic/score/mean")) {
      c.steps.push_back(step);
      c.score.push_back(number(line, "critic/score/mean"));
      c.acc.push_back(number(line, "critic/acc/mean"));
    }
    if (line.contains(val + "acc/mean")) {
      c.val_steps.push_back(step);
      c.val_acc.push_back(number(line, val + "acc/mean"));
      c.val_score.push_back(number(line, val + "score/mean"));
    }
  });
  return c;
}

std::vector<PlotPanel> run_curve_panels(const RunCurves& c, const std::string& title) {
  PlotPanel score{title + ": score", "step", {}};
  score.series.push_back({"training batch", c.steps, c.score, false, 0});
  score.series.push_back({"validation", c.val_steps, c.val_score, false, 1});
  PlotPanel acc{title + ": exact-match accuracy", "step", {}};
  acc.series.push_back({"training batch (sampled)", c.steps, c.acc, false, 0});
  acc.series.push_back({"validation", c.val_steps, c.val_acc, false, 1});
  return {score, acc};
}

}  // namespace ppo
