// The experts of Hugging Face MoE folders <-> model/moe.h's stacked parameters. Folders hold one tensor per expert,
// as transformers 4 and 5 both write them:
//   Qwen3-MoE  model.layers.{i}.mlp.gate.weight model.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj.weight Mixtral
//   model.layers.{i}.block_sparse_moe.gate.weight  model.layers.{i}.block_sparse_moe.experts.{e}.{w1,w3,w2}.weight
// (Mixtral's w1 is the gate, w3 the up and w2 the down projection). A folder that holds transformers 5's stacked
// names themselves (mlp.experts.gate_up_proj, mlp.experts.down_proj) is read as it is.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ppo {

// One stored tensor of a parameter, and the shape it must have there.
struct StoredPiece {
  std::string name;
  std::vector<int64_t> shape;
};

// The stored tensors whose flattened values, one after the other, make parameter `name` of shape `shape`: the name
// itself when the folder has it (`has`), Mixtral's name of a router, or, for stacked experts, per expert its tensor
// of down_proj [D, I], or of gate_up_proj its gate and then its up [I, D]. The naming of the folder's expert 0 decides
// between the families (Qwen3-MoE's when neither is there, so that an error names the tensor a Qwen3-MoE folder lacks).
std::vector<StoredPiece> stored_pieces(const std::string& name, c10::IntArrayRef shape,
                                       const std::function<bool(const std::string&)>& has);

// The tensors of an export (parameter names) renamed and split into the folder's per-expert tensors of
// `model_type` (qwen3_moe or mixtral; others are left as they are).
void unstack_experts(std::map<std::string, torch::Tensor>& tensors, const std::string& model_type);

}  // namespace ppo
