#include "rl/metrics.h"

#include <cmath>
#include <limits>

#include "common/error.h"

namespace ppo {

void Metrics::add_mean(const std::string& name, double sum, double count) {
  auto& m = means_[name];
  m.first += sum;
  m.second += count;
}

void Metrics::add_mean_if_any(const std::string& name, double sum, double count) {
  add_mean(name, sum, count);
  optional_means_.insert(name);
}

DeviceMeans::Entry& DeviceMeans::entry(const std::string& name, const torch::Tensor& sum, bool if_any) {
  Entry& e = entries_[name];
  const torch::Tensor value = sum.detach().to(torch::kDouble);
  e.sum = e.sum.defined() ? e.sum + value : value;
  e.if_any = e.if_any || if_any;
  return e;
}

void DeviceMeans::add(const std::string& name, const torch::Tensor& sum, const torch::Tensor& count) {
  Entry& e = entry(name, sum, /*if_any=*/false);
  const torch::Tensor value = count.detach().to(torch::kDouble);
  e.count = e.count.defined() ? e.count + value : value;
}

void DeviceMeans::add(const std::string& name, const torch::Tensor& sum, double count) {
  entry(name, sum, /*if_any=*/false).host_count += count;
}

void DeviceMeans::add_if_any(const std::string& name, const torch::Tensor& sum, const torch::Tensor& count) {
  add(name, sum, count);
  entries_[name].if_any = true;
}

void DeviceMeans::flush(Metrics& metrics) {
  if (entries_.empty()) return;
  std::vector<torch::Tensor> values;
  for (const auto& [name, e] : entries_) {
    values.push_back(e.sum.reshape({}));
    values.push_back(e.count.defined() ? e.count.reshape({}).to(e.sum.device()) : torch::zeros_like(values.back()));
  }
  const torch::Tensor host = torch::stack(values).cpu();  // the one read
  const double* v = host.data_ptr<double>();
  for (const auto& [name, e] : entries_) {
    if (e.if_any)
      metrics.add_mean_if_any(name, v[0], v[1] + e.host_count);
    else
      metrics.add_mean(name, v[0], v[1] + e.host_count);
    v += 2;
  }
  entries_.clear();
}

void Metrics::add_global(const std::string& name, double value) {
  auto& m = globals_[name];
  m.first += value;
  m.second += 1;
}

void Metrics::add_max(const std::string& name, double value) {
  auto it = maxes_.find(name);
  maxes_[name] = it == maxes_.end() ? value : std::max(it->second, value);
}

void Metrics::add_min(const std::string& name, double value) {
  auto it = mins_.find(name);
  mins_[name] = it == mins_.end() ? value : std::min(it->second, value);
}

void Metrics::set(const std::string& name, double value) {
  values_[name] = value;
}

void Metrics::add_value(const std::string& name, double value) {
  values_[name] += value;
}

std::map<std::string, double> Metrics::reduce(Context& context) const {
  std::map<std::string, double> out;
  auto to_tensor = [](const std::vector<double>& v) { return torch::tensor(v, torch::kFloat64); };
  std::vector<double> sums;
  for (const auto& [name, m] : means_) sums.push_back(m.first), sums.push_back(m.second);
  if (!sums.empty()) {
    torch::Tensor t = to_tensor(sums);
    context.all_reduce(t, ReduceOp::sum);
    auto a = t.accessor<double, 1>();
    int64_t i = 0;
    for (const auto& [name, m] : means_) {
      double sum = a[i++], count = a[i++];
      if (count > 0 || !optional_means_.count(name))
        out[name] = count > 0 ? sum / count : std::numeric_limits<double>::quiet_NaN();
    }
  }
  auto reduce_extreme = [&](const std::map<std::string, double>& values, ReduceOp op) {
    if (values.empty()) return;
    std::vector<double> v;
    for (const auto& [name, x] : values) v.push_back(x);
    torch::Tensor t = to_tensor(v);
    context.all_reduce(t, op);
    int64_t i = 0;
    for (const auto& [name, x] : values) out[name] = t[i++].item<double>();
  };
  reduce_extreme(maxes_, ReduceOp::max);
  reduce_extreme(mins_, ReduceOp::min);
  for (const auto& [name, m] : globals_) out[name] = m.first / m.second;
  for (const auto& [name, v] : values_) out[name] = v;
  return out;
}

nlohmann::json metrics_json(const std::map<std::string, double>& metrics) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : metrics) {
    if (std::isfinite(value))
      out[name] = value;
    else
      out[name] = std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf";
  }
  return out;
}

std::map<std::string, double> parse_metrics_json(const nlohmann::json& object, const std::string& what) {
  usage_check(object.is_object(), what + ": the metrics must be a JSON object, not " + object.type_name());
  std::map<std::string, double> out;
  const double inf = std::numeric_limits<double>::infinity();
  for (const auto& [name, value] : object.items()) {
    if (value.is_number()) {
      out[name] = value.get<double>();
      continue;
    }
    const std::string text = value.is_string() ? value.get<std::string>() : "";
    usage_check(text == "nan" || text == "inf" || text == "-inf",
                what + ": metric '" + name + "' must be a number, \"nan\", \"inf\" or \"-inf\", not " +
                    value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    out[name] = text == "nan" ? std::numeric_limits<double>::quiet_NaN() : text == "inf" ? inf : -inf;
  }
  return out;
}

SumReducer rank_sum_reducer(Context& context) {
  return [&context](const torch::Tensor& t) {
    torch::Tensor out = t.contiguous().clone();
    context.all_reduce(out, ReduceOp::sum);
    return out;
  };
}

}  // namespace ppo
