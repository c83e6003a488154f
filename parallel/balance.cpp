// See parallel/balance.h.
#include "parallel/balance.h"

#include <algorithm>
#include <numeric>

namespace ppo {

BalancedBatch balance_batch(const Batch& local, int64_t block_rows, int64_t n, Context& context) {
  const int64_t world = context.world_size(), B = local.size();
  TORCH_CHECK(block_rows >= n && block_rows % n == 0 && B % block_rows == 0,
              "balance_batch: rows per block must be whole prompt groups");
  Batch global;
  for (const auto& [name, t] : local.fields) global.fields[name] = context.all_gather(t);  // rank 0's rows first
  torch::Tensor row_tokens = global.at(field::attention_mask).sum(1).to(torch::kInt64);
  const int64_t groups_per_block = block_rows / n;
  auto group_tokens = [&](int64_t first_row) { return row_tokens.narrow(0, first_row, n).sum().item<int64_t>(); };
  std::vector<int64_t> before(world, 0), after(world, 0);
  std::vector<std::vector<int64_t>> rows(world);
  for (int64_t block = 0; block < B / block_rows; ++block) {
    struct Group {
      int64_t tokens, first_row;
    };
    std::vector<Group> groups;
    for (int64_t q = 0; q < world; ++q)
      for (int64_t j = 0; j < groups_per_block; ++j) {
        const int64_t first = q * B + block * block_rows + j * n;
        groups.push_back({group_tokens(first), first});
        before[q] += groups.back().tokens;
      }
    std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) { return a.tokens > b.tokens; });
    std::vector<int64_t> taken(world, 0);
    for (const Group& g : groups) {
      int64_t best = -1;
      for (int64_t q = 0; q < world; ++q)
        if (taken[q] < groups_per_block && (best < 0 || after[q] < after[best])) best = q;
      taken[best] += 1;
      after[best] += g.tokens;
      for (int64_t i = 0; i < n; ++i) rows[best].push_back(g.first_row + i);
    }
  }
  auto imbalance = [world](const std::vector<int64_t>& load) {
    const double total = static_cast<double>(std::accumulate(load.begin(), load.end(), int64_t{0}));
    return total > 0 ? static_cast<double>(*std::max_element(load.begin(), load.end())) * world / total : 1.0;
  };
  if (imbalance(after) >= imbalance(before))  // greedy is not optimal: never do worse than the dispatcher did
    return {local, imbalance(before), imbalance(before)};
  return {global.select(torch::tensor(rows[context.rank()], torch::kInt64)), imbalance(before), imbalance(after)};
}

}  // namespace ppo
