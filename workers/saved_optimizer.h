// A sharded optimizer state on disk, as ShardedState (workers/sharding.h) writes it: <dir>/<name>_optim.index.json
// (the world size W, a tag of the save, and per unit its parameters' names, offsets, shapes and step count) and one
// part per rank, <name>_optim.<r>-of-<W>.safetensors (each unit's moments of the rank's slice, unpadded, with the
// tag, the rank and the world size in its header). Read by any number of ranks, sharded or not.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ppo {

// The index's "format".
constexpr const char* kOptimizerIndexFormat = "ppo.cpp sharded optimizer state";
// <prefix>.<rank>-of-<world>.safetensors: the part rank `rank` of `world` writes.
std::string optimizer_part_path(const std::string& prefix, int64_t rank, int64_t world);
// A unit's flat buffer padded to a multiple of the world size, so that every rank owns an equal slice.
inline int64_t padded_unit_size(int64_t numel, int64_t world) {
  return (numel + world - 1) / world * world;
}

// How a model's trained parameters lie in one unit's flat buffer: what a sharded optimizer state must agree with.
struct UnitLayout {
  std::string name;  // "model.layers.<i>" or "root"
  int64_t numel = 0;
  std::vector<std::string> names;            // the parameters, in the buffer's order
  std::vector<int64_t> offsets;              // where each starts
  std::vector<std::vector<int64_t>> shapes;  // each one's shape
};

// A sharded optimizer state on disk (<dir>/<name>_optim.index.json and its parts), read by parameter name and
// element range whatever the world size that wrote it. The index is read field by field (a field missing, of
// another type or out of range is a UsageError naming the file and the field), and every part is checked when
// opened: missing, damaged (the checkpoint's manifest), written by another save (its run tag) or by another rank or
// world size than its name says is a UsageError naming the file.
class SavedOptimizerState {
 public:
  explicit SavedOptimizerState(const std::string& index_path);
  // A UsageError naming the index and the unit or parameter when its layout differs from the model's `units` (a
  // unit or parameter missing or extra, another offset, size or shape), or when the units' step counts disagree.
  void check_layout(const std::vector<UnitLayout>& units) const;
  // The moments (exp_avg, exp_avg_sq) of elements [begin, end) of parameter `name` (flattened), CPU tensors.
  std::pair<torch::Tensor, torch::Tensor> read(const std::string& name, int64_t begin, int64_t end) const;
  // The updates the parameter's unit received.
  int64_t steps(const std::string& name) const;

 private:
  struct Place {
    std::string unit;
    int64_t offset = 0, numel = 0, steps = 0, unit_numel = 0;
    std::vector<int64_t> shape;
  };
  std::string index_path_, tag_;
  std::vector<UnitLayout> units_;  // as the index records them
  int64_t world_ = 1;
  std::vector<std::string> parts_;
  std::map<std::string, Place> places_;
  mutable std::map<int64_t, std::map<std::string, torch::Tensor>> loaded_;  // part -> its tensors, read on demand
  const std::map<std::string, torch::Tensor>& part(int64_t k) const;
};

}  // namespace ppo
