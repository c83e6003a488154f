#include "model/moe.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <algorithm>
#include <string>
#include <utility>

#include "model/lora_linear.h"

namespace ppo {

namespace {

// The router's auxiliary losses enter the backward through the layer's output: forward it is the output unchanged;
// backward it passes the output's gradient on and hands the router's probability and z sums the losses' gradients
// (MoeRouting::grads), known only once the whole forward has routed (f counts every layer). Under gradient
// checkpointing the layer recomputed in the backward makes a node of its own, so the router gets them either way.
struct RouterLossBackward : torch::autograd::Node {
  std::shared_ptr<MoeRouting> routing;  // a copy of the forward's, kept alive until the backward
  int64_t layer = 0;
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    auto [prob_grad, z_grad] = routing->grads(layer);
    return {grads[0], prob_grad, z_grad};
  }
  std::string name() const override { return "RouterLossBackward"; }
};

}  // namespace

int64_t moe_layer_count(const ModelConfig& c) {
  int64_t n = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) n += is_moe_layer(c, i) ? 1 : 0;
  return n;
}

std::shared_ptr<MoeRouting> make_moe_routing(const ModelConfig& c, const torch::Tensor& token_mask) {
  auto routing = std::make_shared<MoeRouting>();
  routing->num_experts = c.moe.num_experts;
  routing->top_k = c.moe.num_experts_per_tok;
  routing->moe_layers = moe_layer_count(c);
  routing->aux_coef = c.moe.router_aux_loss_coef;
  routing->z_coef = c.moe.router_z_loss_coef;
  if (token_mask.defined()) routing->token_mask = token_mask.reshape({-1}).to(torch::kFloat);
  const auto layers = static_cast<size_t>(c.num_layers);
  routing->counts.resize(layers);
  routing->prob_sums.resize(layers);
  routing->z_sums.resize(layers);
  routing->replay.resize(layers);
  routing->chosen.resize(layers);
  return routing;
}

double MoeRouting::rows() const {
  return std::max(tokens, 0.0) * static_cast<double>(moe_layers);
}

torch::Tensor MoeRouting::expert_load() const {
  torch::Tensor total;
  for (const torch::Tensor& c : counts)
    if (c.defined()) total = total.defined() ? total + c : c.clone();
  if (!total.defined()) return torch::zeros({num_experts});
  return total * (static_cast<double>(num_experts) / std::max(total.sum().item<double>(), 1.0));
}

torch::Tensor MoeRouting::aux_loss() const {
  torch::Tensor counted, probs;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (!counts[i].defined()) continue;
    counted = counted.defined() ? counted + counts[i] : counts[i].clone();
    probs = probs.defined() ? probs + prob_sums[i].detach() : prob_sums[i].detach().clone();
  }
  if (!counted.defined()) return torch::zeros({});
  const double n = std::max(rows(), 1.0);
  return (counted / n * (probs / n)).sum() * static_cast<double>(num_experts);
}

torch::Tensor MoeRouting::z_loss() const {
  torch::Tensor total = torch::zeros({});
  for (const torch::Tensor& z : z_sums)
    if (z.defined()) total = total.to(z.device()) + z.detach();
  return total / std::max(rows(), 1.0);
}

std::pair<torch::Tensor, torch::Tensor> MoeRouting::grads(int64_t layer) {
  const torch::Tensor& probs = prob_sums.at(static_cast<size_t>(layer));
  const double n = std::max(rows(), 1.0);
  if (!prob_grad_.defined()) {
    torch::Tensor counted = torch::zeros_like(probs);
    for (const torch::Tensor& c : counts)
      if (c.defined()) counted += c;
    prob_grad_ = counted * (aux_coef * loss_scale * static_cast<double>(num_experts) / (n * n));
  }
  return {prob_grad_, torch::full({}, z_coef * loss_scale / n, probs.options())};
}

MoeExpertsImpl::MoeExpertsImpl(int64_t experts, int64_t hidden, int64_t intermediate) {
  gate_up_proj = register_parameter("gate_up_proj", torch::empty({experts, 2 * intermediate, hidden}));
  down_proj = register_parameter("down_proj", torch::empty({experts, hidden, intermediate}));
}

MoeBlockImpl::MoeBlockImpl(const ModelConfig& c)
    : top_k(c.moe.num_experts_per_tok), norm_topk_prob(c.moe.norm_topk_prob) {
  gate = register_module("gate", make_linear(c.hidden_size, c.moe.num_experts, /*bias=*/false));
  experts = register_module("experts", MoeExperts(c.moe.num_experts, c.hidden_size, expert_intermediate_size(c)));
}

ExpertFactors expert_factors(const LoraAdapterImpl& adapter, int64_t experts) {
  const torch::Tensor& a = adapter.lora_A->weight;  // [r E, in]
  const torch::Tensor& b = adapter.lora_B->weight;  // [out, r E]
  return {a.reshape({experts, -1, a.size(1)}), b.reshape({b.size(0), -1, experts}).permute({2, 0, 1}), adapter.scaling};
}

namespace {

// x [n, in] times expert e's weight [out, in] transposed, plus its LoRA update where `lora` is given.
torch::Tensor expert_product(const torch::Tensor& x, const torch::Tensor& weight, const ExpertFactors* lora,
                             int64_t e) {
  torch::Tensor y = torch::mm(x, weight.t());
  if (lora) y = y + torch::mm(torch::mm(x, lora->A[e].t()), lora->B[e].t()) * lora->scaling;
  return y;
}

// The factors of an expert adapter that is present and on, else null (into `slot`).
const ExpertFactors* active_factors(const LoraAdapter& adapter, int64_t experts, ExpertFactors& slot) {
  if (!adapter || !*adapter->enabled) return nullptr;
  slot = expert_factors(*adapter, experts);
  return &slot;
}

}  // namespace

torch::Tensor grouped_experts(const torch::Tensor& x, const torch::Tensor& indices, const torch::Tensor& weights,
                              const torch::Tensor& gate_up, const torch::Tensor& down,
                              const ExpertFactors* gate_up_lora, const ExpertFactors* down_lora) {
  const int64_t k = indices.size(1), E = gate_up.size(0), I = down.size(2);
  const torch::Tensor flat = indices.reshape({-1});
  const torch::Tensor order = std::get<1>(flat.sort(/*stable=*/c10::optional<bool>(true), /*dim=*/0));
  const torch::Tensor token = torch::div(order, k, "floor");
  const torch::Tensor counts = torch::bincount(flat, {}, E).cpu();
  const torch::Tensor rows = x.index_select(0, token);  // [N k, D], grouped by expert
  std::vector<torch::Tensor> parts;
  int64_t start = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = counts[e].item<int64_t>();
    if (n == 0) continue;
    const torch::Tensor h = expert_product(rows.narrow(0, start, n), gate_up[e], gate_up_lora, e);  // [n, 2 I]
    parts.push_back(expert_product(torch::silu(h.narrow(1, 0, I)) * h.narrow(1, I, I), down[e], down_lora, e));
    start += n;
  }
  const torch::Tensor products = torch::cat(parts);  // [N k, D]
  const torch::Tensor weighted = products * weights.reshape({-1}).index_select(0, order).unsqueeze(1);
  return torch::zeros_like(x).index_add(0, token, weighted.to(x.scalar_type()));
}

torch::Tensor MoeBlockImpl::forward(const torch::Tensor& x, const std::shared_ptr<MoeRouting>& routing, int64_t layer) {
  const auto shape = x.sizes().vec();
  const torch::Tensor rows = x.reshape({-1, x.size(-1)});
  const torch::Tensor logits = gate(rows);  // [N, E]
  const torch::Tensor probs = torch::softmax(logits.to(torch::kFloat), -1);
  const auto at = static_cast<size_t>(layer);
  torch::Tensor indices, weights;
  std::tie(weights, indices) = probs.topk(top_k, -1);  // the router's own choice
  const torch::Tensor own = indices;
  if (routing && at < routing->replay.size() && routing->replay[at].defined()) {
    const torch::Tensor given = routing->replay[at].reshape({-1, top_k}).to(rows.device(), torch::kLong);
    TORCH_CHECK(given.size(0) == rows.size(0), "MoeBlock: ", given.size(0), " tokens to replay, the forward has ",
                rows.size(0));
    indices = torch::where(given.ge(0), given, indices);
    weights = probs.gather(1, indices);
  }
  if (norm_topk_prob) weights = weights / weights.sum(-1, true);
  const int64_t E = experts->gate_up_proj.size(0);
  ExpertFactors gate_up_factors, down_factors;
  torch::Tensor out = grouped_experts(rows, indices, weights.to(logits.scalar_type()), experts->gate_up_proj,
                                      experts->down_proj, active_factors(experts->gate_up_lora, E, gate_up_factors),
                                      active_factors(experts->down_lora, E, down_factors));
  if (routing && routing->record) routing->chosen[at] = own.detach();
  if (routing && routing->statistics) {
    const bool masked = routing->token_mask.defined();
    const torch::Tensor mask =
        masked ? routing->token_mask.to(rows.device()) : torch::ones({rows.size(0)}, probs.options());
    if (routing->tokens < 0) routing->tokens = masked ? mask.sum().item<double>() : static_cast<double>(rows.size(0));
    routing->counts[at] = torch::zeros({probs.size(1)}, probs.options())
                              .scatter_add_(0, indices.reshape({-1}), mask.repeat_interleave(top_k))
                              .detach();
    routing->prob_sums[at] = (probs * mask.unsqueeze(1)).sum(0);
    routing->z_sums[at] = (torch::logsumexp(logits.to(torch::kFloat), -1).square() * mask).sum();
    const bool grads = torch::GradMode::is_enabled() && routing->prob_sums[at].requires_grad() &&
                       (routing->aux_coef > 0 || routing->z_coef > 0);
    if (grads) {
      auto node = std::make_shared<RouterLossBackward>();
      node->routing = routing;
      node->layer = layer;
      node->set_next_edges(torch::autograd::collect_next_edges(out, routing->prob_sums[at], routing->z_sums[at]));
      torch::Tensor passed = out.detach();
      torch::autograd::set_history(passed, node);
      out = passed;
    }
  }
  return out.view(shape);
}

}  // namespace ppo
