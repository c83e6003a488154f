// See workers/sharding.h.
#include "workers/sharding.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <set>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/manifest.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "workers/saved_optimizer.h"

namespace ppo {
namespace {

torch::Tensor empty_like_dtype(const torch::Tensor& p) {
  return torch::empty({0}, torch::TensorOptions().dtype(p.scalar_type()).device(p.device()));
}

// Appends the parameter `name` to unit `u`'s layout.
void add_to_unit(ShardUnit& u, const std::string& name, const torch::Tensor& p) {
  TORCH_CHECK(u.params.empty() || u.params[0].scalar_type() == p.scalar_type(),
              "sharding: a unit's parameters must share one dtype");
  u.params.push_back(p);
  u.names.push_back(name);
  u.shapes.push_back(p.sizes().vec());
  u.offsets.push_back(u.numel);
  u.numel += p.numel();
}

// Elements [first, first + count) of parameter k of unit `u`, flat: read from the model's files, or its own values.
using PartReader = std::function<torch::Tensor(const ShardUnit& u, size_t k, int64_t first, int64_t count)>;

torch::Tensor own_part(const ShardUnit& u, size_t k, int64_t first, int64_t count) {
  return u.params[k].detach().reshape({-1}).narrow(0, first, count);
}

// Rank `rank`'s slice of unit `u` on the host (zero past its parameters, the padding), read a parameter's part at a
// time.
torch::Tensor read_slice(const ShardUnit& u, int64_t world, int64_t rank, const PartReader& read) {
  torch::NoGradGuard no_grad;
  const int64_t s = u.padded / world, lo = rank * s, hi = lo + s;
  const auto dtype = u.params.empty() ? torch::kFloat : u.params[0].scalar_type();
  torch::Tensor slice = torch::zeros({s}, torch::TensorOptions().dtype(dtype));
  for (size_t k = 0; k < u.params.size(); ++k) {
    const int64_t param_end = k + 1 < u.offsets.size() ? u.offsets[k + 1] : u.numel;
    const int64_t begin = std::max(lo, u.offsets[k]), end = std::min(hi, param_end);
    if (begin < end) slice.narrow(0, begin - lo, end - begin).copy_(read(u, k, begin - u.offsets[k], end - begin));
  }
  return slice;
}

// Stage 3: unit `u` keeps only this rank's slice (read_slice), and its parameters give up their storage.
void keep_slice(ShardUnit& u, int64_t world, int64_t rank, const PartReader& read) {
  u.slice = read_slice(u, world, rank, read);
  for (auto& p : u.params) p.set_data(empty_like_dtype(p));
}

// The units of `model` (its decoder layers in order, then the root unit) with their layouts for `world` ranks, nothing
// sliced; with `trained_only` without the parameters that are not trained (a LoRA model's frozen base stays whole).
std::vector<ShardUnit> unit_layout(torch::nn::Module& model, TransformerImpl& backbone, bool trained_only,
                                   int64_t world) {
  const auto layers = static_cast<int64_t>(backbone.layers->size());
  std::vector<ShardUnit> units(static_cast<size_t>(layers) + 1);
  for (int64_t i = 0; i < layers; ++i) units[static_cast<size_t>(i)].name = "model.layers." + std::to_string(i);
  units.back().name = "root";
  const std::string layer_prefix = "model.layers.";
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    if (trained_only && !item.value().requires_grad()) continue;
    size_t unit = units.size() - 1;
    if (name.rfind(layer_prefix, 0) == 0)
      unit = std::stoul(name.substr(layer_prefix.size(), name.find('.', layer_prefix.size()) - layer_prefix.size()));
    add_to_unit(units.at(unit), name, item.value());
  }
  for (ShardUnit& u : units) u.padded = padded_unit_size(u.numel, world);
  return units;
}

}  // namespace

// ------------------------------------------------------------------------------------------------ ShardedBuild

ShardedBuild::ShardedBuild(int64_t world, int64_t rank, std::unique_ptr<HfWeightParts> hf)
    : world_(world), rank_(rank), hf_(std::move(hf)) {}

void ShardedBuild::take(const std::string& unit, const std::vector<std::pair<std::string, torch::Tensor>>& params) {
  ShardUnit u;
  u.name = unit;
  for (const auto& [name, p] : params) add_to_unit(u, name, p);
  u.padded = padded_unit_size(u.numel, world_);
  if (hf_) {
    for (size_t k = 0; k < u.params.size(); ++k) hf_->check(u.names[k], u.params[k]);
    keep_slice(u, world_, rank_, [&](const ShardUnit& v, size_t k, int64_t first, int64_t count) {
      return hf_->part(v.names[k], v.params[k], first, count);
    });
  } else {
    keep_slice(u, world_, rank_, own_part);
  }
  units_.push_back(std::move(u));
}

int64_t ShardedBuild::numel(const std::string& name) const {
  for (const ShardUnit& u : units_)
    for (size_t k = 0; k < u.names.size(); ++k)
      if (u.names[k] == name) return c10::multiply_integers(u.shapes[k]);
  throw std::logic_error("ShardedBuild: no parameter " + name);
}

int64_t ShardedBuild::parameter_count() const {
  int64_t count = 0;
  for (const ShardUnit& u : units_) count += u.numel;
  return count;
}

// ------------------------------------------------------------------------------------------------ ShardedState

ShardedState::ShardedState(std::vector<Unit> units, torch::nn::Module& model, TransformerImpl& backbone, int64_t stage,
                           torch::Device device, const OffloadConfig& offload, const OptimConfig* optim,
                           double grad_clip, int64_t total_steps, Context& context)
    : units_(std::move(units)),
      backbone_(backbone),
      stage_(stage),
      device_(device),
      offload_(offload),
      optim_(optim ? std::make_unique<OptimConfig>(*optim) : nullptr),
      grad_clip_(grad_clip),
      total_steps_(total_steps),
      context_(context),
      world_(context.world_size()),
      rank_(context.rank()) {
  index_parameters(model);
}

ShardedState::ShardedState(torch::nn::Module& model, TransformerImpl& backbone, int64_t stage, torch::Device device,
                           const OffloadConfig& offload, const OptimConfig* optim, double grad_clip,
                           int64_t total_steps, Context& context)
    : ShardedState(unit_layout(model, backbone, /*trained_only=*/optim != nullptr, context.world_size()), model,
                   backbone, stage, device, offload, optim, grad_clip, total_steps, context) {
  if (stage_ == 3)
    for (Unit& u : units_) keep_slice(u, world_, rank_, own_part);
}

ShardedState::ShardedState(ShardedBuild&& built, torch::nn::Module& model, TransformerImpl& backbone,
                           torch::Device device, const OffloadConfig& offload, const OptimConfig* optim,
                           double grad_clip, int64_t total_steps, Context& context)
    : ShardedState(std::move(built.units_), model, backbone, /*stage=*/3, device, offload, optim, grad_clip,
                   total_steps, context) {
  TORCH_CHECK(built.world_ == world_ && built.rank_ == rank_, "ShardedState: the build is of another world");
  TORCH_CHECK(units_.size() == backbone.layers->size() + 1, "ShardedState: the build has ", units_.size(),
              " units, the model ", backbone.layers->size() + 1);
}

void ShardedState::index_parameters(torch::nn::Module& model) {
  std::map<std::string, std::pair<size_t, size_t>> place;
  for (size_t unit = 0; unit < units_.size(); ++unit)
    for (size_t k = 0; k < units_[unit].names.size(); ++k) place[units_[unit].names[k]] = {unit, k};
  holds_whole_model_ = true;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const auto found = place.find(item.key());
    if (found != place.end()) module_order_.push_back(found->second);
    holds_whole_model_ = holds_whole_model_ && found != place.end();
  }
  if (stage_ >= 2) backbone_.shards = this;
}

ShardedState::~ShardedState() {
  if (backbone_.shards == this) backbone_.shards = nullptr;
}

torch::Tensor ShardedState::flat_values(const Unit& u) const {
  if (u.params.empty()) return torch::zeros({u.padded});  // a LoRA actor's root unit: nothing trained there
  std::vector<torch::Tensor> pieces;
  for (const auto& p : u.params) pieces.push_back(p.detach().reshape({-1}));
  torch::Tensor flat = torch::cat(pieces);
  if (u.padded > u.numel) flat = torch::constant_pad_nd(flat, {0, u.padded - u.numel});
  return flat;
}

std::vector<torch::Tensor> ShardedState::placed_tensors() const {
  std::vector<torch::Tensor> out;
  for (const Unit& u : units_) {
    if (stage_ == 3) {
      out.push_back(u.slice);
    } else {
      out.insert(out.end(), u.params.begin(), u.params.end());
    }
  }
  return out;
}

void ShardedState::materialize(Unit& u) {
  if (u.gathered.defined() || u.params.empty()) return;
  torch::NoGradGuard no_grad;
  torch::Tensor full = torch::empty({u.padded}, u.slice.options().device(device_));
  context_.all_gather_into(u.slice.device() == device_ ? u.slice : u.slice.to(device_), full);
  for (size_t k = 0; k < u.params.size(); ++k) {
    const int64_t end = k + 1 < u.offsets.size() ? u.offsets[k + 1] : u.numel;
    u.params[k].set_data(full.slice(0, u.offsets[k], end).view(u.shapes[k]));
  }
  u.gathered = full;
}

void ShardedState::dematerialize(Unit& u) {
  for (auto& p : u.params) p.set_data(empty_like_dtype(p));
  u.gathered = torch::Tensor();
}

void ShardedState::gather_root() {
  if (stage_ == 3) materialize(units_.back());
}

void ShardedState::release_root() {
  if (stage_ == 3 && !whole_) dematerialize(units_.back());
}

void ShardedState::gather_all() {
  if (stage_ != 3) return;
  for (Unit& u : units_) materialize(u);
  whole_ = true;
}

void ShardedState::release_all() {
  if (stage_ != 3) return;
  whole_ = false;
  for (Unit& u : units_) dematerialize(u);
}

bool ShardedState::reduces_in_backward() const {
  return optim_ && (stage_ == 3 || (stage_ == 2 && backbone_.config.enable_gradient_checkpointing));
}

void ShardedState::gather(int64_t layer) {
  if (gathers_layers()) materialize(units_.at(static_cast<size_t>(layer)));
}

void ShardedState::release(int64_t layer) {
  if (gathers_layers()) dematerialize(units_.at(static_cast<size_t>(layer)));
}

void ShardedState::reduce_gradients(int64_t layer) {
  if (optim_) reduce_unit(units_.at(static_cast<size_t>(layer)));
}

// The unit's accumulated gradients (in .grad; zeros where a parameter has none, so that every rank sends the same
// layout), summed over the ranks into this rank's slice, added to the slice held from earlier micro-batches.
void ShardedState::reduce_unit(Unit& u) {
  torch::NoGradGuard no_grad;
  if (u.params.empty()) return;
  torch::Tensor flat =
      torch::zeros({u.padded}, torch::TensorOptions().dtype(u.params[0].scalar_type()).device(device_));
  for (size_t k = 0; k < u.params.size(); ++k) {
    torch::Tensor& p = u.params[k];
    if (!p.grad().defined()) continue;
    const int64_t end = k + 1 < u.offsets.size() ? u.offsets[k + 1] : u.numel;
    flat.slice(0, u.offsets[k], end).copy_(p.grad().reshape({-1}));
    p.mutable_grad() = torch::Tensor();
  }
  torch::Tensor mine = context_.reduce_scatter(flat);
  if (offload_.grad) mine = host_copy(mine);
  if (u.grad.defined()) {
    u.grad.add_(mine.to(u.grad.device()));
  } else {
    u.grad = world_ == 1 && !offload_.grad ? mine : mine.clone();
  }
}

void ShardedState::after_backward(Context& context) {
  (void)context;
  if (!optim_ || stage_ < 2) return;
  const bool layers_done = reduces_in_backward();
  for (size_t i = 0; i < units_.size(); ++i)
    if (i + 1 == units_.size() || !layers_done) reduce_unit(units_[i]);
}

// One unit's AdamW update of this rank's slice: the slice of the parameters (stage 3: the slice itself), updated,
// then all-gathered into the whole parameters below stage 3.
void ShardedState::update_unit(Unit& u, double lr, double scale) {
  torch::NoGradGuard no_grad;
  const int64_t s = slice_size(u);
  if (s == 0) return;
  const bool on_host = offload_.optimizer;
  std::optional<HostMemoryScope> host;
  if (on_host) host.emplace();
  torch::Tensor master;
  if (stage_ == 3) {
    master = on_host ? host_copy(u.slice) : u.slice;
  } else {
    master = flat_values(u).slice(0, rank_ * s, (rank_ + 1) * s);
    if (on_host) master = host_copy(master);
  }
  const torch::Device where = master.device();
  torch::Tensor grad = u.grad.defined() ? u.grad.to(where) : torch::zeros_like(master);
  if (scale != 1.0) grad = grad * scale;
  if (!u.exp_avg.defined()) {
    u.exp_avg = torch::zeros_like(master);
    u.exp_avg_sq = torch::zeros_like(master);
  } else if (u.exp_avg.device() != where) {
    u.exp_avg = u.exp_avg.to(where);
    u.exp_avg_sq = u.exp_avg_sq.to(where);
  }
  u.steps += 1;
  adamw_update(master, grad, u.exp_avg, u.exp_avg_sq, u.steps, lr, *optim_);
  u.grad = torch::Tensor();
  host.reset();
  if (stage_ == 3) {
    if (on_host) u.slice.copy_(master);
    if (u.gathered.defined()) {  // gathered for the phase (the root unit): its whole parameters follow the update
      dematerialize(u);
      materialize(u);
    }
    return;
  }
  torch::Tensor full = torch::empty({u.padded}, master.options().device(device_));
  context_.all_gather_into(master.to(device_).contiguous(), full);
  for (size_t k = 0; k < u.params.size(); ++k) {
    const int64_t end = k + 1 < u.offsets.size() ? u.offsets[k + 1] : u.numel;
    u.params[k].detach().copy_(full.slice(0, u.offsets[k], end).view_as(u.params[k]));
  }
}

StepResult ShardedState::step(Context& context) {
  TORCH_CHECK(optim_, "a frozen model has no optimizer");
  (void)context;
  int64_t whole_gradient_bytes = 0;  // stage 1: the whole gradients, accumulated over the micro-batches until now
  if (stage_ == 1) {
    for (const Unit& u : units_)
      for (const auto& p : u.params)
        if (p.grad().defined()) whole_gradient_bytes += static_cast<int64_t>(p.grad().nbytes());
    for (Unit& u : units_) reduce_unit(u);
  }
  StepResult result;
  torch::NoGradGuard no_grad;
  // The global norm: this rank's slices' sums of squares (float64), summed over the ranks.
  std::vector<torch::Tensor> squares;
  int64_t slice_bytes = 0;
  for (const Unit& u : units_)
    if (u.grad.defined()) {
      squares.push_back(u.grad.to(torch::kDouble).pow(2).sum());  // where the slices are: one host read below
      slice_bytes += static_cast<int64_t>(u.grad.nbytes());
    }
  torch::Tensor total =
      squares.empty() ? torch::zeros({1}, torch::kDouble) : torch::stack(squares).sum().reshape({1}).cpu();
  context_.all_reduce(total, ReduceOp::sum);
  result.grad_norm = std::sqrt(total.item<double>());
  result.lr = scheduled_lr(*optim_, steps_taken_, total_steps_);
  // Stage 1 holds the whole gradients until the step; from stage 2 on they are transient (one micro-batch's backward).
  model_state_bytes_ = parameter_bytes() + std::max(whole_gradient_bytes, slice_bytes);
  if (!std::isfinite(result.grad_norm)) {
    result.skipped = true;
    for (Unit& u : units_) u.grad = torch::Tensor();
    return result;
  }
  const double scale = grad_clip_ > 0 && result.grad_norm > grad_clip_ ? grad_clip_ / (result.grad_norm + 1e-6) : 1.0;
  for (Unit& u : units_) update_unit(u, result.lr, scale);
  ++steps_taken_;
  model_state_bytes_ += state_bytes();
  return result;
}

void ShardedState::zero_grad() {
  for (Unit& u : units_) {
    for (auto& p : u.params) p.mutable_grad() = torch::Tensor();
    u.grad = torch::Tensor();
  }
}

int64_t ShardedState::state_bytes() const {
  int64_t bytes = 0;
  for (const Unit& u : units_)
    if (u.exp_avg.defined()) bytes += static_cast<int64_t>(u.exp_avg.nbytes() + u.exp_avg_sq.nbytes());
  return bytes;
}

int64_t ShardedState::parameter_bytes() const {
  int64_t bytes = 0;
  for (const Unit& u : units_) {
    if (stage_ == 3) {
      bytes += static_cast<int64_t>(u.slice.nbytes());
    } else {
      for (const auto& p : u.params) bytes += static_cast<int64_t>(p.nbytes());
    }
  }
  return bytes;
}

void ShardedState::reslice() {
  if (stage_ != 3) return;
  torch::NoGradGuard no_grad;
  for (Unit& u : units_) {  // ParamPlacement holds the slice tensor: its data is replaced, not it
    u.slice.set_data(read_slice(u, world_, rank_, own_part).to(u.slice.device()));
    dematerialize(u);
  }
  whole_ = false;
}

void ShardedState::save_weights(const std::string& path) {
  TORCH_CHECK(stage_ == 3 && holds_whole_model_, "save_weights: a stage-3 model whose units hold all of it");
  std::optional<SafetensorsWriter> writer;
  if (rank_ == 0) {
    std::vector<SafetensorsWriter::Spec> specs;
    for (const Unit& u : units_)
      for (size_t k = 0; k < u.names.size(); ++k) specs.push_back({u.names[k], u.params[k].scalar_type(), u.shapes[k]});
    writer.emplace(path, specs);
  }
  each_unit_whole([&](const ShardUnit& u) {
    if (writer)
      for (const torch::Tensor& p : u.params) writer->add(p);
  });
  if (writer) writer->finish();
}

void ShardedState::each_unit_whole(const std::function<void(const ShardUnit&)>& fn) {
  TORCH_CHECK(stage_ == 3, "each_unit_whole: stage 3 only");
  for (Unit& u : units_) {
    const bool gathered = u.gathered.defined();
    materialize(u);
    fn(u);
    if (!gathered) dematerialize(u);
  }
}

void ShardedState::load_weights(const std::string& path) {
  TORCH_CHECK(stage_ == 3 && holds_whole_model_, "load_weights: a stage-3 model whose units hold all of it");
  TORCH_CHECK(!whole_, "load_weights: the model is gathered");
  usage_check(std::filesystem::exists(path), "checkpoint file not found: " + path);
  check_regular_file(path);
  verify_manifest_entry(path);
  const SafetensorsReader reader = SafetensorsReader::file(path);
  std::set<std::string> names;
  for (const Unit& u : units_)
    for (size_t k = 0; k < u.names.size(); ++k) {
      check_checkpoint_tensor(reader, path, u.names[k], u.shapes[k]);
      names.insert(u.names[k]);
    }
  for (const std::string& name : reader.names())  // as load_module: a tensor with no parameter is another model's
    usage_check(names.count(name) > 0, path + ": tensor '" + name + "' is not a parameter of this model (" +
                                           "a checkpoint of another model, or of LoRA adapters)");
  for (Unit& u : units_) {  // ParamPlacement holds the slice tensor: its data is replaced, not it
    const auto dtype = u.slice.scalar_type();
    const torch::Tensor slice =
        read_slice(u, world_, rank_, [&](const ShardUnit& v, size_t k, int64_t first, int64_t count) {
          return reader.read(v.names[k], first, count).to(dtype);
        });
    u.slice.set_data(slice.to(u.slice.device()));
  }
}

void ShardedState::save_optimizer(const std::string& dir, const std::string& name) {
  if (!optim_) return;
  // A tag shared by this save's parts: rank 0's random number, sent to every rank.
  std::string tag = rank_ == 0 ? std::to_string(std::random_device{}()) + std::to_string(std::random_device{}()) : "";
  tag = context_.all_gather(tag).front();
  const std::string prefix = dir + "/" + name + "_optim";
  std::map<std::string, torch::Tensor> tensors;
  for (const Unit& u : units_) {
    const int64_t s = slice_size(u), first = rank_ * s;
    const int64_t held = std::min(s, std::max<int64_t>(0, u.numel - first));
    const auto dtype = u.params.empty() ? torch::kFloat : u.params[0].scalar_type();
    for (const auto& [suffix, moment] : {std::pair{".exp_avg", &u.exp_avg}, std::pair{".exp_avg_sq", &u.exp_avg_sq}})
      tensors[u.name + suffix] = moment->defined() ? moment->slice(0, 0, held).cpu() : torch::zeros({held}, dtype);
  }
  save_safetensors(optimizer_part_path(prefix, rank_, world_), tensors,
                   {{"tag", tag}, {"rank", std::to_string(rank_)}, {"world_size", std::to_string(world_)}});
  if (rank_ != 0) return;
  nlohmann::json units = nlohmann::json::array();
  for (const Unit& u : units_) {
    nlohmann::json params = nlohmann::json::array();
    for (size_t k = 0; k < u.params.size(); ++k) {
      const int64_t end = k + 1 < u.offsets.size() ? u.offsets[k + 1] : u.numel;
      params.push_back(
          {{"name", u.names[k]}, {"offset", u.offsets[k]}, {"numel", end - u.offsets[k]}, {"shape", u.shapes[k]}});
    }
    units.push_back({{"name", u.name}, {"numel", u.numel}, {"steps", u.steps}, {"parameters", params}});
  }
  nlohmann::json index = {{"format", kOptimizerIndexFormat}, {"world_size", world_}, {"tag", tag}, {"units", units}};
  write_file_atomic(prefix + ".index.json", index.dump(1) + "\n");
}

void ShardedState::load_optimizer(const std::string& dir, const std::string& name) {
  TORCH_CHECK(optim_, "a frozen model has no optimizer");
  const std::string index = dir + "/" + name + "_optim.index.json";
  std::optional<SavedOptimizerState> saved;
  std::unique_ptr<Optimizer> whole;  // an unsharded checkpoint: read whole (in module order), then sliced
  std::map<std::pair<size_t, size_t>, size_t> position;  // (unit, index in it) -> position in module order
  if (std::filesystem::exists(index)) {
    saved.emplace(index);
    std::vector<UnitLayout> layout;
    for (const Unit& u : units_) layout.push_back({u.name, u.numel, u.names, u.offsets, u.shapes});
    saved->check_layout(layout);
  } else {
    gather_all();
    std::vector<torch::Tensor> params;
    std::vector<std::string> names;
    for (const auto& [unit, k] : module_order_) {
      position[{unit, k}] = params.size();
      params.push_back(units_[unit].params[k]);
      names.push_back(units_[unit].names[k]);
    }
    whole = std::make_unique<Optimizer>(params, *optim_, grad_clip_, total_steps_);
    whole->load(dir + "/" + name + "_optim.pt", names);
  }
  torch::NoGradGuard no_grad;
  for (size_t unit = 0; unit < units_.size(); ++unit) {
    Unit& u = units_[unit];
    const int64_t s = slice_size(u), first = rank_ * s;
    const auto options = torch::TensorOptions().dtype(u.params.empty() ? torch::kFloat : u.params[0].scalar_type());
    u.steps = 0;
    torch::Tensor exp_avg = torch::zeros({s}, options), exp_avg_sq = torch::zeros({s}, options);
    for (size_t k = 0; k < u.params.size(); ++k) {
      const int64_t begin = u.offsets[k], end = k + 1 < u.offsets.size() ? u.offsets[k + 1] : u.numel;
      const int64_t lo = std::max(begin, first), hi = std::min(end, first + s);
      std::optional<Optimizer::Moments> moments;
      if (!saved) moments = whole->moments(position.at({unit, k}));
      u.steps = std::max(u.steps, saved ? saved->steps(u.names[k]) : moments->steps);
      if (lo >= hi) continue;
      torch::Tensor a, b;
      if (saved) {
        std::tie(a, b) = saved->read(u.names[k], lo - begin, hi - begin);
      } else {
        a = moments->exp_avg.reshape({-1}).slice(0, lo - begin, hi - begin);
        b = moments->exp_avg_sq.reshape({-1}).slice(0, lo - begin, hi - begin);
      }
      exp_avg.slice(0, lo - first, hi - first).copy_(a);
      exp_avg_sq.slice(0, lo - first, hi - first).copy_(b);
    }
    u.exp_avg = offload_.optimizer ? host_copy(exp_avg) : exp_avg.to(device_);
    u.exp_avg_sq = offload_.optimizer ? host_copy(exp_avg_sq) : exp_avg_sq.to(device_);
  }
  whole.reset();
  release_all();
}

}  // namespace ppo
