// See workers/saved_optimizer.h.
#include "workers/saved_optimizer.h"

#include <algorithm>
#include <filesystem>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/manifest.h"
#include "common/strings.h"
#include "model/safetensors.h"

namespace ppo {

std::string optimizer_part_path(const std::string& prefix, int64_t rank, int64_t world) {
  return prefix + "." + std::to_string(rank) + "-of-" + std::to_string(world) + ".safetensors";
}

namespace {

// The largest element count the index may record for a unit: far above any model, and no sum of two overflows.
constexpr int64_t kMaxUnitNumel = int64_t{1} << 48;
constexpr int64_t kMaxSteps = int64_t{1} << 53;  // step counts stay exact as JSON numbers
constexpr int64_t kMaxWorldSize = int64_t{1} << 20;

// Fields of the index, each read with its type and range checked; errors name the file and the field's path.
struct IndexReader {
  const std::string& path;

  [[noreturn]] void fail(const std::string& field, const std::string& problem) const {
    throw UsageError(path + ": field " + field + " " + problem);
  }
  const nlohmann::json& at(const nlohmann::json& object, const std::string& key, const std::string& where) const {
    if (!object.is_object()) fail(where.empty() ? "(the document)" : where, "is not an object");
    const auto it = object.find(key);
    if (it == object.end()) fail(where + (where.empty() ? "" : ".") + key, "is missing");
    return *it;
  }
  int64_t whole(const nlohmann::json& value, const std::string& field, int64_t lo, int64_t hi) const {
    bool in_range = false;  // (lo, hi >= 0) unsigned values above 2^63 - 1 compare as unsigned, never cast
    if (value.is_number_unsigned())
      in_range =
          value.get<uint64_t>() <= static_cast<uint64_t>(hi) && static_cast<int64_t>(value.get<uint64_t>()) >= lo;
    else if (value.is_number_integer())
      in_range = value.get<int64_t>() >= lo && value.get<int64_t>() <= hi;
    if (!in_range)
      fail(field, "is " + value.dump() + ", expected a whole number in [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "]");
    return value.get<int64_t>();
  }
  std::string text(const nlohmann::json& value, const std::string& field) const {
    if (!value.is_string()) fail(field, "is " + value.dump() + ", expected a string");
    return value.get<std::string>();
  }
  const nlohmann::json& array(const nlohmann::json& value, const std::string& field) const {
    if (!value.is_array()) fail(field, "is not an array");
    return value;
  }
};

}  // namespace

SavedOptimizerState::SavedOptimizerState(const std::string& index_path) : index_path_(index_path) {
  check_regular_file(index_path);
  verify_manifest_entry(index_path);
  const nlohmann::json index = read_json_file(index_path);
  const IndexReader r{index_path};
  usage_check(r.text(r.at(index, "format", ""), "format") == kOptimizerIndexFormat,
              index_path + ": not a " + kOptimizerIndexFormat);
  world_ = r.whole(r.at(index, "world_size", ""), "world_size", 1, kMaxWorldSize);
  tag_ = r.text(r.at(index, "tag", ""), "tag");
  const nlohmann::json& units = r.array(r.at(index, "units", ""), "units");
  for (size_t i = 0; i < units.size(); ++i) {
    const std::string where = "units[" + std::to_string(i) + "]";
    UnitLayout unit;
    unit.name = r.text(r.at(units[i], "name", where), where + ".name");
    unit.numel = r.whole(r.at(units[i], "numel", where), where + ".numel", 0, kMaxUnitNumel);
    const int64_t steps = r.whole(r.at(units[i], "steps", where), where + ".steps", 0, kMaxSteps);
    const nlohmann::json& params = r.array(r.at(units[i], "parameters", where), where + ".parameters");
    for (size_t k = 0; k < params.size(); ++k) {
      const std::string at = where + ".parameters[" + std::to_string(k) + "]";
      const std::string name = r.text(r.at(params[k], "name", at), at + ".name");
      Place place;
      place.unit = unit.name;
      place.offset = r.whole(r.at(params[k], "offset", at), at + ".offset", 0, unit.numel);
      place.numel = r.whole(r.at(params[k], "numel", at), at + ".numel", 0, unit.numel);
      place.steps = steps;
      place.unit_numel = unit.numel;
      if (place.offset + place.numel > unit.numel)
        r.fail(at, "(offset " + std::to_string(place.offset) + ", numel " + std::to_string(place.numel) +
                       ") lies outside its unit of " + std::to_string(unit.numel) + " elements");
      const nlohmann::json& shape = r.array(r.at(params[k], "shape", at), at + ".shape");
      int64_t product = 1;
      for (size_t d = 0; d < shape.size(); ++d) {
        place.shape.push_back(r.whole(shape[d], at + ".shape[" + std::to_string(d) + "]", 0, kMaxUnitNumel));
        product = place.shape.back() == 0 ? 0 : std::min(product * place.shape.back(), kMaxUnitNumel + 1);
      }
      if (product != place.numel)
        r.fail(at + ".shape",
               "is " + shape_text(place.shape) + ", which does not hold numel " + std::to_string(place.numel));
      if (places_.count(name)) r.fail(at + ".name", "'" + name + "' is listed twice");
      places_[name] = place;
      unit.names.push_back(name);
      unit.offsets.push_back(place.offset);
      unit.shapes.push_back(place.shape);
    }
    units_.push_back(std::move(unit));
  }
  const std::string suffix = ".index.json";
  const std::string prefix = index_path.substr(0, index_path.size() - suffix.size());
  for (int64_t k = 0; k < world_; ++k) {
    parts_.push_back(optimizer_part_path(prefix, k, world_));
    usage_check(std::filesystem::exists(parts_.back()), parts_.back() + ": missing; the sharded optimizer state of " +
                                                            index_path + " has " + std::to_string(world_) + " parts");
  }
}

void SavedOptimizerState::check_layout(const std::vector<UnitLayout>& units) const {
  std::map<std::string, const UnitLayout*> saved;
  for (const UnitLayout& u : units_) saved[u.name] = &u;
  std::map<std::string, bool> expected;
  for (const UnitLayout& u : units) expected[u.name] = true;
  for (const UnitLayout& u : units_)
    usage_check(expected.count(u.name) == 1, index_path_ + ": unit " + u.name +
                                                 " is not a unit of this model's trained parameters: the state of "
                                                 "another model (another shape, or other LoRA settings)");
  int64_t steps = -1;
  std::string steps_unit;
  for (const UnitLayout& u : units) {
    const auto it = saved.find(u.name);
    usage_check(it != saved.end(), index_path_ + ": no unit " + u.name + " (this model's has " +
                                       std::to_string(u.numel) + " elements): the state of another model");
    const UnitLayout& s = *it->second;
    usage_check(s.numel == u.numel && s.names.size() == u.names.size(),
                index_path_ + ": unit " + u.name + " has " + std::to_string(s.numel) + " elements in " +
                    std::to_string(s.names.size()) + " parameters, this model's " + std::to_string(u.numel) + " in " +
                    std::to_string(u.names.size()));
    for (size_t k = 0; k < u.names.size(); ++k) {
      const Place& place = places_.at(s.names[k]);
      usage_check(s.names[k] == u.names[k] && s.offsets[k] == u.offsets[k] && place.shape == u.shapes[k],
                  index_path_ + ": unit " + u.name + " parameter " + std::to_string(k) + " is " + s.names[k] +
                      " at offset " + std::to_string(s.offsets[k]) + " with shape " + shape_text(place.shape) +
                      "; this model's is " + u.names[k] + " at offset " + std::to_string(u.offsets[k]) +
                      " with shape " + shape_text(u.shapes[k]));
    }
    if (u.numel == 0 || s.names.empty()) continue;
    const int64_t unit_steps = places_.at(s.names[0]).steps;
    if (steps < 0) steps = unit_steps, steps_unit = u.name;
    usage_check(unit_steps == steps, index_path_ + ": unit " + u.name + " took " + std::to_string(unit_steps) +
                                         " optimizer steps and unit " + steps_unit + " " + std::to_string(steps) +
                                         ": the units of a model step together");
  }
}

const std::map<std::string, torch::Tensor>& SavedOptimizerState::part(int64_t k) const {
  auto it = loaded_.find(k);
  if (it != loaded_.end()) return it->second;
  const std::string& path = parts_[static_cast<size_t>(k)];
  check_regular_file(path);
  verify_manifest_entry(path);
  // The tag, rank and world size are in the header's metadata: read with the data, checked before it is used.
  nlohmann::json metadata;
  std::map<std::string, torch::Tensor> tensors = load_safetensors(path, &metadata);
  const auto recorded = [&](const char* key) {
    return metadata.is_object() && metadata.contains(key) && metadata[key].is_string()
               ? metadata[key].get<std::string>()
               : std::string("(none)");
  };
  usage_check(recorded("tag") == tag_, path + ": a part of another save (tag '" + recorded("tag") + "', " +
                                           index_path_ + " says '" + tag_ +
                                           "'): every part must come from the same checkpoint");
  usage_check(recorded("rank") == std::to_string(k) && recorded("world_size") == std::to_string(world_),
              path + ": written by rank " + recorded("rank") + " of " + recorded("world_size") +
                  ", and its name says rank " + std::to_string(k) + " of " + std::to_string(world_) +
                  ": parts were renamed or swapped; every part must keep the name its rank wrote");
  return loaded_.emplace(k, std::move(tensors)).first->second;
}

std::pair<torch::Tensor, torch::Tensor> SavedOptimizerState::read(const std::string& name, int64_t begin,
                                                                  int64_t end) const {
  auto it = places_.find(name);
  usage_check(it != places_.end(), index_path_ + ": no optimizer state for parameter " + name);
  const Place& place = it->second;
  usage_check(0 <= begin && begin <= end && end <= place.numel, index_path_ + ": range outside parameter " + name);
  const int64_t lo = place.offset + begin, hi = place.offset + end;
  const int64_t slice = padded_unit_size(place.unit_numel, world_) / world_;
  torch::Tensor exp_avg, exp_avg_sq;
  for (int64_t k = slice > 0 ? lo / slice : 0; slice > 0 && k * slice < hi; ++k) {
    const auto& tensors = part(k);
    const auto a = tensors.find(place.unit + ".exp_avg"), b = tensors.find(place.unit + ".exp_avg_sq");
    const std::string& path = parts_[static_cast<size_t>(k)];
    usage_check(a != tensors.end() && b != tensors.end(), path + ": no moments of unit " + place.unit);
    const int64_t first = k * slice, held = std::min(slice, std::max<int64_t>(0, place.unit_numel - first));
    usage_check(a->second.numel() == held && b->second.numel() == held,
                path + ": unit " + place.unit + " has " + std::to_string(a->second.numel()) + " elements, expected " +
                    std::to_string(held));
    if (!exp_avg.defined()) {
      exp_avg = torch::zeros({end - begin}, a->second.options());
      exp_avg_sq = torch::zeros({end - begin}, b->second.options());
    }
    const int64_t from = std::max(lo, first), to = std::min(hi, first + held);
    if (from >= to) continue;
    exp_avg.slice(0, from - lo, to - lo).copy_(a->second.slice(0, from - first, to - first));
    exp_avg_sq.slice(0, from - lo, to - lo).copy_(b->second.slice(0, from - first, to - first));
  }
  if (!exp_avg.defined()) exp_avg = torch::zeros({0}), exp_avg_sq = torch::zeros({0});
  return {exp_avg, exp_avg_sq};
}

int64_t SavedOptimizerState::steps(const std::string& name) const {
  auto it = places_.find(name);
  usage_check(it != places_.end(), index_path_ + ": no optimizer state for parameter " + name);
  return it->second.steps;
}

}  // namespace ppo
