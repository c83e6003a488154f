// The weights a generation decodes with: each decoder layer's projections fused for no-grad decoding ([q; k; v] and
// [gate; up] stacked, LoRA's updates merged, cast to the compute dtype, packed once on the CPU), built once per
// generation. They stand in for the layers' own projections in the prefills (model/kv_cache.h's LayerProjections)
// and are what the decode step (decode/step.h) multiplies by.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "decode/packed_gemm.h"
#include "model/kv_cache.h"
#include "model/transformer.h"

namespace ppo {

// One projection for no-grad decoding, x w (+ bias), in the dtype the matmuls run in (compute_dtype: the autocast
// dtype when model.autocast_dtype is set, else model.dtype), with w held as the [in, out] operand of x w: float32 on
// the CPU packed once (decode/packed_gemm.h: each product then streams it with no per-call packing), elsewhere the
// transpose of the [out, in] weight (a view; o's and down's the module's own tensor when nothing merges or casts).
struct FusedProjection {
  PackedWeight packed;    // float32 on the CPU
  torch::Tensor operand;  // [in, out] elsewhere (undefined when packed)
  torch::Tensor bias;     // [out], undefined without one
  int64_t out_features() const { return packed.panels.defined() ? packed.cols : operand.size(1); }
  // x [..., in] -> [..., out].
  torch::Tensor operator()(const torch::Tensor& x) const;
  // out [S, out] = x w (+ bias), or with `accumulate` out += x w (+ bias): x [S, in] and out in the compute dtype,
  // written in place (packed: with no ATen op).
  void into(const torch::Tensor& x, const torch::Tensor& out, bool accumulate) const;
};
// The projection of `weight` [out, in] (+ `bias` [out], may be undefined) in `dtype`.
FusedProjection fuse_projection(const torch::Tensor& weight, const torch::Tensor& bias, torch::ScalarType dtype);

// The projections of one decoder layer for no-grad decoding, LoRA's adapters merged in: [q; k; v] and [gate; up]
// stacked along the output dimension, so that a decode step runs one matmul where the modules run three (and two).
struct FusedLayerWeights {
  FusedProjection qkv;      // D -> (H + 2 H_kv) Dh, with the biases of model.attention_bias
  FusedProjection o;        // H Dh -> D
  FusedProjection gate_up;  // D -> 2 I (a dense layer's; an MoE layer runs its block's own experts)
  FusedProjection down;     // I -> D
};

// Every layer's, as the prefills' LayerProjections.
struct FusedWeights final : LayerProjections {
  std::vector<FusedLayerWeights> layers;
  torch::Tensor project(int64_t layer, Kind kind, const torch::Tensor& x) const override;
};

// The fused weights of `model` as they are now (a copy: built again after the weights change).
std::shared_ptr<const FusedWeights> fuse_weights(TransformerImpl& model);

}  // namespace ppo
