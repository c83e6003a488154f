// The dispatcher: which rows of the global batch a rank owns.
#pragma once

#include <cstdint>
#include <vector>

namespace ppo {

// Every rank sees the same global batch of `batch` prompts. It is cut into blocks of `block` prompts (the greatest
// common divisor of the actor's and critic's mini-batch sizes), each block padded to a multiple of `world` when
// `pad` (the padding repeats the block's first prompt and is masked out everywhere), and rank r takes the r-th
// equal contiguous chunk of every block. With one mini-batch this is the r-th contiguous chunk of the batch; with
// several, every mini-batch holds the same prompts on any number of ranks, so N ranks compute what one rank does.
// Returns positions in the global batch; -1 - p marks a padding copy of position p.
inline std::vector<int64_t> dispatch_positions(int64_t batch, int64_t block, int64_t world, int64_t rank, bool pad) {
  const int64_t padded_block = pad ? (block + world - 1) / world * world : block;
  const int64_t per_rank = padded_block / world;
  std::vector<int64_t> positions;
  for (int64_t start = 0; start < batch; start += block) {
    for (int64_t i = rank * per_rank; i < (rank + 1) * per_rank; ++i)
      positions.push_back(i < block ? start + i : -1 - start);
  }
  return positions;
}

}  // namespace ppo
