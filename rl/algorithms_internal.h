// What the algorithm files (algorithms.cpp, advantages.cpp, losses.cpp) share beyond algorithms.h: a mask in a
// tensor's dtype, the [B, T] shape check, and the lookups of a registry's rows by name.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "common/strings.h"

namespace ppo {

// The names of a registry's rows, in order.
template <class Spec>
std::vector<std::string> names_of(const std::vector<Spec>& registry) {
  std::vector<std::string> names;
  for (const Spec& row : registry) names.push_back(row.name);
  return names;
}

// The row of `registry` named `name`; otherwise a UsageError "key: unknown <what> 'name'; valid: ...".
template <class Spec>
const Spec& row_named(const std::vector<Spec>& registry, const std::string& name, const std::string& key,
                      const std::string& what) {
  for (const Spec& row : registry)
    if (name == row.name) return row;
  throw UsageError(key + ": unknown " + what + " '" + name + "'; valid: " + join(names_of(registry), ", "));
}

// The mask as a tensor of `like`'s dtype and device.
torch::Tensor mask_like(const torch::Tensor& mask, const torch::Tensor& like);
// TORCH_CHECK that t is [B, T] like the response mask; `what` names t in the message.
void check_bt(const torch::Tensor& t, const torch::Tensor& mask, const char* what);

}  // namespace ppo
