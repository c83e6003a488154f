// The weights a generation decodes with: each decoder layer's projections fused for no-grad decoding ([q; k; v] and
// [gate; up] stacked, LoRA's updates merged, cast to the compute dtype, laid out once on the CPU), built once per
// generation. They stand in for the layers' own projections in the prefills (model/kv_cache.h's LayerProjections)
// and are what the decode step (decode/step.h) multiplies by.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "decode/dnnl_gemm.h"
#include "decode/packed_gemm.h"
#include "model/kv_cache.h"
#include "model/transformer.h"

namespace ppo {

// One projection for no-grad decoding, x w (+ bias), in the dtype the matmuls run in (compute_dtype: the autocast
// dtype when model.autocast_dtype is set, else model.dtype), with w held as the [in, out] operand of x w. Float32 on
// the CPU, w is laid out once for a product with no per-call packing: reordered for oneDNN's matmul
// (decode/dnnl_gemm.h) where the build and machine have its brgemm kernel and uses_dnnl says so, else packed in
// panels for the hand-written loop (decode/packed_gemm.h). The choice is made once per generation from the weight and
// GenerationParams::product_rows (rollout.micro_batch_size in training: the same on every rank), so a row's result does
// not depend on the rows beside it. Elsewhere
// w is the transpose of the [out, in] weight (a view; o's and down's the module's own tensor when nothing merges or
// casts).
struct FusedProjection {
  DnnlWeight dnnl;        // float32 on the CPU, oneDNN's layout
  PackedWeight packed;    // float32 on the CPU, the packed loop's panels
  torch::Tensor operand;  // [in, out] elsewhere (undefined when laid out for the CPU)
  torch::Tensor bias;     // [out], undefined without one (oneDNN's weight carries its own)
  int64_t out_features() const { return dnnl ? dnnl.cols : packed.panels.defined() ? packed.cols : operand.size(1); }
  // x [..., in] -> [..., out].
  torch::Tensor operator()(const torch::Tensor& x) const;
  // out [S, out] = x w (+ bias), or with `accumulate` out += x w (+ bias): x [S, in] and out in the compute dtype,
  // written in place (on the CPU in float32: with no ATen op).
  void into(const torch::Tensor& x, const torch::Tensor& out, bool accumulate) const;
};
// Whether a float32 weight of `in` x `out` on the CPU, in a generation whose decode step runs `rows` rows, is
// multiplied by oneDNN: from 64 rows, with weights of 65,536 elements or more. With the weights coming from memory, as
// a step's layers do, the packed loop is the faster of the two up to 32 rows (by up to 1.4x at 16 rows and 1.7x at 8:
// it prefetches the next panel), oneDNN from 48 rows (by 3 to 23% at 64); oneDNN's call costs more than the tiny
// models' products take (BENCHMARKS.md, "The static decode step").
constexpr bool uses_dnnl(int64_t in, int64_t out, int64_t rows) {
  return rows >= 64 && in * out >= 65536;
}
// The projection of `weight` [out, in] (+ `bias` [out], may be undefined) in `dtype`, for a generation whose decode
// step runs `rows` rows (rollout.micro_batch_size; 0: the packed loop whatever the width).
FusedProjection fuse_projection(const torch::Tensor& weight, const torch::Tensor& bias, torch::ScalarType dtype,
                                int64_t rows);

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
std::shared_ptr<const FusedWeights> fuse_weights(TransformerImpl& model, int64_t rows);

}  // namespace ppo
