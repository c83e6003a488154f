// A model's tensors across the ranks: flattened for one collective, gradients summed, and checked identical.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "parallel/context.h"

namespace ppo {

// The tensors of `parts` (one dtype) in one flat buffer, in order; and that buffer copied back into them. The
// flattened collectives (the gradients' all-reduce, the weight sync) use them.
torch::Tensor flatten_tensors(const std::vector<torch::Tensor>& parts);
void unflatten_into(const torch::Tensor& flat, const std::vector<torch::Tensor>& parts);

// Sums the gradients of `params` over all ranks with ONE flattened allreduce (not one per parameter).
// Parameters without a gradient get a zero gradient first so every rank packs the same layout.
void all_reduce_gradients(const std::vector<torch::Tensor>& params, Context& context);

// Throws when the parameters differ between ranks: compares a float64 checksum (sum and sum of |x| weighted by
// position) with an allreduce max and min. `what` names the moment ("start-up", "step 10").
void check_identical_across_ranks(const std::vector<torch::Tensor>& params, Context& context, const std::string& what);

}  // namespace ppo
