#include "model/hf_experts.h"

#include <utility>

#include "common/strings.h"

namespace ppo {

namespace {

constexpr const char *kGateUp = ".mlp.experts.gate_up_proj", *kDown = ".mlp.experts.down_proj";
constexpr const char* kRouter = ".mlp.gate.weight";

// "model.layers.3.mlp.experts.down_proj" with suffix ".mlp.experts.down_proj" -> "model.layers.3".
std::string layer_of(const std::string& name, const std::string& suffix) {
  return name.substr(0, name.size() - suffix.size());
}

// The per-expert tensor name of `layer` in a Qwen3-MoE (`mixtral` false) or Mixtral folder; `which` is gate, up or
// down.
std::string expert_name(const std::string& layer, int64_t e, const std::string& which, bool mixtral) {
  const std::string index = std::to_string(e);
  if (!mixtral) return layer + ".mlp.experts." + index + "." + which + "_proj.weight";
  const char* w = which == "gate" ? "w1" : which == "up" ? "w3" : "w2";
  return layer + ".block_sparse_moe.experts." + index + "." + w + ".weight";
}

}  // namespace

std::vector<StoredPiece> stored_pieces(const std::string& name, c10::IntArrayRef shape,
                                       const std::function<bool(const std::string&)>& has) {
  const std::vector<int64_t> whole(shape.begin(), shape.end());
  if (has(name)) return {{name, whole}};
  if (ends_with(name, kRouter)) {
    const std::string mixtral = layer_of(name, kRouter) + ".block_sparse_moe.gate.weight";
    return {{has(mixtral) ? mixtral : name, whole}};
  }
  const bool gate_up = ends_with(name, kGateUp), down = ends_with(name, kDown);
  if ((!gate_up && !down) || shape.size() != 3) return {{name, whole}};
  const std::string layer = layer_of(name, gate_up ? kGateUp : kDown);
  const bool mixtral = !has(expert_name(layer, 0, "gate", false)) && has(expert_name(layer, 0, "gate", true));
  std::vector<StoredPiece> pieces;
  for (int64_t e = 0; e < shape[0]; ++e) {
    if (down) {
      pieces.push_back({expert_name(layer, e, "down", mixtral), {shape[1], shape[2]}});
      continue;
    }
    pieces.push_back({expert_name(layer, e, "gate", mixtral), {shape[1] / 2, shape[2]}});
    pieces.push_back({expert_name(layer, e, "up", mixtral), {shape[1] / 2, shape[2]}});
  }
  return pieces;
}

void unstack_experts(std::map<std::string, torch::Tensor>& tensors, const std::string& model_type) {
  if (model_type != "qwen3_moe" && model_type != "mixtral") return;
  const bool mixtral = model_type == "mixtral";
  std::map<std::string, torch::Tensor> out;
  for (auto& [name, t] : tensors) {
    if (ends_with(name, kGateUp)) {
      const std::string layer = layer_of(name, kGateUp);
      const int64_t I = t.size(1) / 2;
      for (int64_t e = 0; e < t.size(0); ++e) {
        out[expert_name(layer, e, "gate", mixtral)] = t[e].narrow(0, 0, I).contiguous();
        out[expert_name(layer, e, "up", mixtral)] = t[e].narrow(0, I, I).contiguous();
      }
    } else if (ends_with(name, kDown)) {
      const std::string layer = layer_of(name, kDown);
      for (int64_t e = 0; e < t.size(0); ++e) out[expert_name(layer, e, "down", mixtral)] = t[e].contiguous();
    } else if (mixtral && ends_with(name, kRouter)) {
      out[layer_of(name, kRouter) + ".block_sparse_moe.gate.weight"] = t;
    } else {
      out[name] = t;
    }
  }
  tensors.swap(out);
}

}  // namespace ppo
