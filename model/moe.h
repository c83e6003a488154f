// Mixture-of-experts MLPs (model.moe.*): transformers' Qwen3MoeSparseMoeBlock and MixtralSparseMoeBlock
// (modeling_qwen3_moe.py, modeling_mixtral.py). A router, a bias-free linear D -> E whose softmax in float32 picks
// each token's top-k experts (renormalised with model.moe.norm_topk_prob), and E SwiGLU experts held stacked, as
// transformers 5 holds them: gate_up_proj [E, 2 I, D] (gate rows first) and down_proj [E, D, I]. Parameter names:
//   model.layers.{i}.mlp.gate.weight [E, D], model.layers.{i}.mlp.experts.{gate_up_proj,down_proj}
// (model/hf.h maps the per-expert tensors of Hugging Face folders onto them and back). The experts' products run
// grouped by expert: the token-expert pairs sorted by expert, one matmul pair per expert over its rows.
// A forward also records, per MoE layer, what transformers' load_balancing_loss_func and the router z-loss read
// (MoeRouting), and can take each token's experts from a record (routing replay).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/model_config.h"
#include "model/lora_linear.h"

namespace ppo {

// What the MoE layers of one forward share: the real tokens, what each layer's router did, and the experts to replay.
// A training forward with autograd makes one (TransformerImpl::forward and forward_packed, when the model has MoE
// layers); its layers add their share of the auxiliary losses' gradients in the backward, scaled by `loss_scale`.
struct MoeRouting {
  int64_t num_experts = 0, top_k = 0, moe_layers = 0;
  double aux_coef = 0, z_coef = 0;  // model.moe.router_aux_loss_coef and router_z_loss_coef
  torch::Tensor token_mask;         // [N] float32: 1 for a real token (padded forwards), undefined = all real
  // Whether the layers keep what the losses and their metrics read (training forwards): counts, prob_sums, z_sums.
  bool statistics = false;
  // Per decoder layer (undefined for a dense one), float32: the top-k assignments to each expert over the real tokens
  // [E] (no gradient), the router probabilities summed over them [E], and logsumexp(router logits)^2 summed [].
  std::vector<torch::Tensor> counts, prob_sums, z_sums;
  double tokens = -1;  // the real tokens, counted once by the first MoE layer that keeps statistics
  // When set for a layer: the experts [N, k] (an integer type) each token uses there, -1 for the router's own choice
  // (their weights still come from the router's probabilities, renormalised where the family does).
  std::vector<torch::Tensor> replay;
  // With `record`, each MoE layer keeps the experts its router chose [N, k] int64 in `chosen` (its own top-k, also
  // where it replays others).
  bool record = false;
  std::vector<torch::Tensor> chosen;
  // The weight the trainer gives this forward's loss (its micro-batch's share), set before the backward: the
  // auxiliary losses' gradients are aux_coef * loss_scale and z_coef * loss_scale times theirs. 0 = none.
  double loss_scale = 0;

  // transformers' load_balancing_loss_func over every MoE layer of the forward: E sum_e f_e P_e, with f_e the
  // assignments to expert e per real token and P_e its mean router probability. A float32 scalar without gradient.
  torch::Tensor aux_loss() const;
  // The router z-loss: mean over real tokens and MoE layers of logsumexp(router logits)^2 (no gradient).
  torch::Tensor z_loss() const;
  // Each expert's share of the assignments, summed over layers, times E: [E] float32 (1 = balanced).
  torch::Tensor expert_load() const;
  // The gradient of the two losses (times their coefficients and loss_scale) with respect to layer `layer`'s
  // prob_sums and z_sums: [E] and [].
  std::pair<torch::Tensor, torch::Tensor> grads(int64_t layer);

 private:
  torch::Tensor prob_grad_;  // aux_coef * loss_scale * E * f / rows, once the first layer asks
  double rows() const;       // real tokens times MoE layers (0 before a layer routed)
};

// LoRA on one stacked expert weight [E, out, in] (PEFT's target_parameters, its ParamWrapper): expert e computes
// W_e x + scaling B_e A_e x. The adapter holds them as PEFT does, lora_A [r E, in] and lora_B [out, r E]: A_e is rows
// [e r, e r + r) of lora_A and B_e the columns e, e + E, ..., e + (r - 1) E of lora_B.
struct ExpertFactors {
  torch::Tensor A;  // [E, r, in]
  torch::Tensor B;  // [E, out, r]
  double scaling = 0;
};
// The factors of `adapter` (an adapter of rank r E on E experts).
ExpertFactors expert_factors(const LoraAdapterImpl& adapter, int64_t experts);

// The experts of one MoE layer, stacked, with their LoRA adapters where actor.lora.target_parameters names them
// ("gate_up_lora", "down_lora": model/lora.h).
struct MoeExpertsImpl : torch::nn::Module {
  MoeExpertsImpl(int64_t experts, int64_t hidden, int64_t intermediate);
  torch::Tensor gate_up_proj;  // [E, 2 I, D]: rows [0, I) gate, [I, 2 I) up
  torch::Tensor down_proj;     // [E, D, I]
  LoraAdapter gate_up_lora{nullptr}, down_lora{nullptr};
};
TORCH_MODULE(MoeExperts);

struct MoeBlockImpl : torch::nn::Module {
  explicit MoeBlockImpl(const ModelConfig& config);
  // x [..., D] -> [..., D]. With `routing`, layer `layer`'s statistics go to it, its experts are taken from
  // routing->replay[layer] when that is set, and, under autograd with a loss_scale, the output carries the auxiliary
  // losses' gradient into the router.
  torch::Tensor forward(const torch::Tensor& x, const std::shared_ptr<MoeRouting>& routing = nullptr,
                        int64_t layer = 0);
  torch::nn::Linear gate{nullptr};  // the router
  MoeExperts experts{nullptr};
  int64_t top_k;
  bool norm_topk_prob;
};
TORCH_MODULE(MoeBlock);

// sum over each token's k experts of weights[t, j] * down_e(silu(gate_e(x)) * up_e(x)), e = indices[t, j]: x [N, D],
// indices and weights [N, k], gate_up [E, 2 I, D], down [E, D, I] -> [N, D] in x's dtype. The pairs are sorted by
// expert (stably, so each token's terms add in expert order, as transformers adds them) and each expert multiplies
// its rows at once. With adapters' factors, each expert's products add their LoRA updates.
torch::Tensor grouped_experts(const torch::Tensor& x, const torch::Tensor& indices, const torch::Tensor& weights,
                              const torch::Tensor& gate_up, const torch::Tensor& down,
                              const ExpertFactors* gate_up_lora = nullptr, const ExpertFactors* down_lora = nullptr);

// A MoeRouting for a forward of `config`'s model over tokens whose real ones `token_mask` [N] marks (undefined: all).
std::shared_ptr<MoeRouting> make_moe_routing(const ModelConfig& config, const torch::Tensor& token_mask);

// The decoder layers with MoE MLPs (is_moe_layer).
int64_t moe_layer_count(const ModelConfig& config);

}  // namespace ppo
