#include "decode/fused_weights.h"

#include <vector>

namespace ppo {

FusedProjection fuse_projection(const torch::Tensor& weight, const torch::Tensor& bias, torch::ScalarType dtype,
                                int64_t rows) {
  torch::NoGradGuard no_grad;
  FusedProjection p;
  const torch::Tensor w = weight.to(dtype);
  const bool cpu_float = w.is_cpu() && dtype == torch::kFloat;
  if (cpu_float && uses_dnnl(w.size(1), w.size(0), rows)) {
    p.dnnl = dnnl_pack(w.t(), bias);
    if (p.dnnl) return p;
  }
  if (cpu_float)
    p.packed = pack_weight(w.t());
  else
    p.operand = w.t();
  if (bias.defined()) p.bias = bias.to(dtype);
  return p;
}

torch::Tensor FusedProjection::operator()(const torch::Tensor& x) const {
  if (operand.defined()) return torch::nn::functional::linear(x, operand.t(), bias);
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = out_features();
  auto out = torch::empty(shape, x.options());
  into(x.reshape({-1, x.size(-1)}).contiguous(), out.view({-1, out_features()}), /*accumulate=*/false);
  return out;
}

void FusedProjection::into(const torch::Tensor& x, const torch::Tensor& result, bool accumulate) const {
  torch::Tensor out = result;  // a handle to the same storage, for the ops that take a mutable one
  if (dnnl)
    dnnl_matmul(x, dnnl, out, accumulate);
  else if (packed.panels.defined())
    packed_matmul(x, packed, out, accumulate, bias);
  else if (accumulate)
    bias.defined() ? out.addmm_(x, operand).add_(bias) : out.addmm_(x, operand);
  else if (bias.defined())
    at::addmm_out(out, bias, x, operand);
  else
    at::mm_out(out, x, operand);
}

torch::Tensor FusedWeights::project(int64_t layer, Kind kind, const torch::Tensor& x) const {
  const FusedLayerWeights& w = layers.at(static_cast<size_t>(layer));
  switch (kind) {
    case qkv:
      return w.qkv(x);
    case o:
      return w.o(x);
    case gate_up:
      return w.gate_up(x);
    case down:
      return w.down(x);
  }
  TORCH_CHECK(false, "FusedWeights::project: unknown projection");
}

std::shared_ptr<const FusedWeights> fuse_weights(TransformerImpl& model, int64_t rows) {
  torch::NoGradGuard no_grad;
  const torch::ScalarType dtype = model.compute_dtype();
  auto fused = std::make_shared<FusedWeights>();
  for (size_t i = 0; i < model.layers->size(); ++i) {
    const auto& layer = *model.layers->ptr<DecoderLayerImpl>(i);
    const auto& a = *layer.self_attn;
    // LoRA's updates merged into the fused weights: W + scaling B A, once per generation.
    const auto merged = [](const torch::nn::Linear& linear, const LoraAdapter& adapter) {
      return adapter && *adapter->enabled ? linear->weight + adapter->delta_weight() : linear->weight;
    };
    FusedLayerWeights w;
    w.qkv = fuse_projection(
        torch::cat({merged(a.q_proj, a.q_lora), merged(a.k_proj, a.k_lora), merged(a.v_proj, a.v_lora)}, 0),
        a.q_proj->bias.defined() ? torch::cat({a.q_proj->bias, a.k_proj->bias, a.v_proj->bias}, 0) : torch::Tensor(),
        dtype, rows);
    w.o = fuse_projection(merged(a.o_proj, a.o_lora), {}, dtype, rows);
    if (layer.mlp) {  // an MoE layer runs its block's own experts
      const auto& m = *layer.mlp;
      w.gate_up = fuse_projection(torch::cat({merged(m.gate_proj, m.gate_lora), merged(m.up_proj, m.up_lora)}, 0), {},
                                  dtype, rows);
      w.down = fuse_projection(merged(m.down_proj, m.down_lora), {}, dtype, rows);
    }
    fused->layers.push_back(std::move(w));
  }
  return fused;
}

}  // namespace ppo
