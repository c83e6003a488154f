// libFuzzer target for the sharded optimizer state's index (workers/saved_optimizer.cpp): the input is
// actor_optim.index.json, beside fixed parts written by 1 and by 2 ranks for a model of two units. Reading it and
// checking it against the model's layout must succeed or throw ppo::UsageError; an index that passes must read every
// parameter's moments as they were saved (the index cannot make the reader take another range). Any other
// exception, crash, sanitizer report or failed check is a bug. Built and run by scripts/fuzz.sh
// (`bash scripts/fuzz.sh build 30 optim_index`); inputs that start with 0xFE are deep-nesting recipes.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "common/error.h"
#include "common/files.h"
#include "common/manifest.h"
#include "model/safetensors.h"
#include "tests/fuzz/fuzz_support.h"
#include "workers/saved_optimizer.h"

namespace {

[[noreturn]] void finding(const std::string& what) {
  ppo_fuzz::finding("fuzz_optim_index", what);
}

// Two units: a layer of a [2, 3] and b [4] (10 elements), the root of c [5]. The moments of element i of a unit are
// i + 100 u (exp_avg) and its negative (exp_avg_sq), saved by 1 rank (one part) and by 2 (the units padded to 10
// and 6: slices of 5 and 3).
struct Fixture {
  ppo_fuzz::ProcessFolder folder{"fuzz_optim_index"};
  std::string dir = folder.path;
  std::vector<ppo::UnitLayout> layout = {{"model.layers.0", 10, {"a", "b"}, {0, 6}, {{2, 3}, {4}}},
                                         {"root", 5, {"c"}, {0}, {{5}}}};

  Fixture() {
    ppo::accept_checkpoints_without_manifest(true);
    for (int64_t world : {1, 2})
      for (int64_t rank = 0; rank < world; ++rank) {
        std::map<std::string, torch::Tensor> tensors;
        for (size_t u = 0; u < layout.size(); ++u) {
          const int64_t numel = layout[u].numel, slice = (numel + world - 1) / world, first = rank * slice;
          const int64_t held = std::max<int64_t>(0, std::min(slice, numel - first));
          const torch::Tensor values = moments(u).slice(0, first, first + held);
          tensors[layout[u].name + ".exp_avg"] = values.clone();
          tensors[layout[u].name + ".exp_avg_sq"] = -values;
        }
        ppo::save_safetensors(
            dir + "/actor_optim." + std::to_string(rank) + "-of-" + std::to_string(world) + ".safetensors", tensors,
            {{"tag", "t"}, {"rank", std::to_string(rank)}, {"world_size", std::to_string(world)}});
      }
  }
  torch::Tensor moments(size_t unit) const {
    return torch::arange(layout[unit].numel, torch::kFloat) + 100.0 * static_cast<double>(unit);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fixture;
  const std::string index = fixture.dir + "/actor_optim.index.json";
  std::ofstream(index, std::ios::binary | std::ios::trunc) << ppo_fuzz::expand_deep(data, size);
  try {
    const ppo::SavedOptimizerState saved(index);
    saved.check_layout(fixture.layout);
    for (size_t u = 0; u < fixture.layout.size(); ++u) {
      const ppo::UnitLayout& unit = fixture.layout[u];
      for (size_t k = 0; k < unit.names.size(); ++k) {
        const int64_t begin = unit.offsets[k], end = k + 1 < unit.offsets.size() ? unit.offsets[k + 1] : unit.numel;
        const auto [exp_avg, exp_avg_sq] = saved.read(unit.names[k], 0, end - begin);
        const torch::Tensor expected = fixture.moments(u).slice(0, begin, end);
        if (!torch::equal(exp_avg, expected) || !torch::equal(exp_avg_sq, -expected))
          finding("parameter " + unit.names[k] + " read other moments than were saved");
      }
    }
  } catch (const ppo::UsageError&) {
  }
  return 0;
}
