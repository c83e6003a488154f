// Decoder-only transformer of the Llama / Qwen2 / Qwen3 / Mistral / Qwen3-MoE / Mixtral family: token embedding,
// RMSNorm, rotary position embedding (scaled: linear, llama3, yarn), grouped-query attention (optional q/k/v bias,
// heads of any width, Qwen3's q/k norms, Mistral's sliding window), SwiGLU MLP or mixture of SwiGLU experts
// (model/moe.h), tied or untied LM head, and a scalar value head.
// Parameter names match Hugging Face `LlamaForCausalLM` / `Qwen2ForCausalLM` / `Qwen3ForCausalLM` /
// `MistralForCausalLM` (and transformers 5's modules of `Qwen3MoeForCausalLM` / `MixtralForCausalLM`, whose MoE
// layers' names are model/moe.h's) so that checkpoints load by name:
//   model.embed_tokens.weight, model.layers.{i}.self_attn.{q,k,v,o}_proj.weight (+ q/k/v .bias),
//   model.layers.{i}.self_attn.{q,k}_norm.weight (Qwen3), model.layers.{i}.mlp.{gate,up,down}_proj.weight,
//   model.layers.{i}.{input,post_attention}_layernorm.weight, model.norm.weight, lm_head.weight (absent when tied),
//   value_head.{weight,bias} (ValueModel only).
// Reference: transformers/models/llama/modeling_llama.py (LlamaRMSNorm, rotate_half, apply_rotary_pos_emb,
// repeat_kv, LlamaAttention, LlamaMLP, LlamaDecoderLayer), models/qwen3/modeling_qwen3.py (Qwen3Attention),
// models/mistral/modeling_mistral.py and masking_utils.py (the sliding window), modeling_rope_utils.py.
// Its parts: attention in model/attention.h and its masks in model/masks.h, the KV cache in model/kv_cache.h, LoRA's
// adapter module in model/lora_linear.h, autocast in model/autocast.h, ZeRO's per-layer hook and gradient
// checkpointing in model/layer_shards.h, and the attention plan of packed sequences in model/packing.h. The decode
// engine (decode/) runs these modules' weights in its own step; they do not know it.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/host_memory.h"
#include "model/attention.h"
#include "model/autocast.h"
#include "model/kv_cache.h"
#include "model/layer_shards.h"
#include "model/lora_linear.h"
#include "model/moe.h"
#include "model/packing.h"

namespace ppo {

struct MLPImpl : torch::nn::Module {
  explicit MLPImpl(const ModelConfig& config);
  // down(silu(gate(x)) * up(x)), [B, T, D] -> [B, T, D]; with `fused` (a cache's projections, for decoder layer
  // `layer`), gate and up are one matmul.
  torch::Tensor forward(const torch::Tensor& x, const LayerProjections* fused = nullptr, int64_t layer = 0);
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  LoraAdapter gate_lora{nullptr}, up_lora{nullptr}, down_lora{nullptr};  // null without LoRA
};
TORCH_MODULE(MLP);

struct DecoderLayerImpl : torch::nn::Module {
  // Layer `index` of the model: its MLP is dense, or a mixture of experts where is_moe_layer says so.
  DecoderLayerImpl(const ModelConfig& config, int64_t index);
  torch::Tensor forward(const torch::Tensor& x, const AttentionInputs& inputs, KVCache* cache, int64_t layer);
  // Whether a training forward draws random numbers: an adapter with dropout (gradient checkpointing then replays
  // the forward's random state).
  bool draws_random() const;
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  Attention self_attn{nullptr};
  MLP mlp{nullptr};       // a dense layer's ("mlp"), else null
  MoeBlock moe{nullptr};  // an MoE layer's (also named "mlp"), else null
};
TORCH_MODULE(DecoderLayer);

// The backbone ("model." in Hugging Face names).
struct TransformerImpl : torch::nn::Module {
  // Validates `config` (UsageError naming the keys) and initialises with the seeded scheme of init_parameters.
  // `vocab_size` is the resolved V (model.vocab_size, or the tokenizer's size when that is 0). With `sink` (a ZeRO-3
  // build) each decoder layer goes to it as soon as it is built and initialised (model/layer_shards.h).
  TransformerImpl(const ModelConfig& config, int64_t vocab_size, UnitSink* sink = nullptr);
  // input_ids [B, T] int64, position_ids [B, T] int64, attention_mask [B, T_cached + T] (1 real, 0 pad; undefined
  // = all real), cache: null for a plain forward, else the cached positions are attended to and the new ones
  // appended. Returns the final-norm hidden states [B, T, D]. Pad queries (no allowed key) attend uniformly
  // instead of producing NaN; their outputs are meaningless and must be masked by the caller.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                        const torch::Tensor& attention_mask = {}, KVCache* cache = nullptr);
  // Packed sequences (model/packing.h): input_ids and position_ids [1, N] hold sequences of `lengths` tokens (sum N)
  // end to end; each attends causally within itself. Returns the final-norm hidden states [1, N, D], equal within
  // float rounding to the padded forward's at the same tokens.
  torch::Tensor forward_packed(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                               const std::vector<int64_t>& lengths);
  // The dtype the matmuls run in: model.autocast_dtype when set, else model.dtype (the KV cache's dtype).
  torch::ScalarType compute_dtype() const;
  // The dtype of the additive attention mask: float32 (eager attention adds it to float32 scores), or the dtype q
  // has for sdpa (the autocast dtype when model.autocast_dtype is set, else model.dtype).
  torch::ScalarType bias_dtype() const;
  // Rotary tables (AttentionInputs::cos, sin) for position_ids [B, T] whose values are < max_position, in `dtype`.
  // The float32 tables of every position are computed once per device and reused, and so is their copy in the last
  // other dtype asked for.
  std::pair<torch::Tensor, torch::Tensor> rotary(const torch::Tensor& position_ids, int64_t max_position,
                                                 torch::ScalarType dtype);
  // Those float32 tables of every position, cos and sin' [N, Dh] on `device` (the decode step's CPU kernels index
  // them).
  std::pair<torch::Tensor, torch::Tensor> rotary_tables(torch::Device device);
  // Whether some layer has a mixture-of-experts MLP.
  bool has_moe() const { return config.moe.num_experts > 0; }
  // The decoder-layer loop; with model.enable_gradient_checkpointing (training forwards with autograd, no cache)
  // each layer keeps only its input and recomputes its activations in the backward pass.
  torch::Tensor run_blocks(torch::Tensor hidden, const AttentionInputs& inputs, KVCache* cache);

  ModelConfig config;
  int64_t vocab_size;
  bool sdpa;                      // model.attn_implementation resolved (use_sdpa)
  LayerShards* shards = nullptr;  // set by a sharded worker (parallel.zero_stage >= 2), owned by it
  std::shared_ptr<bool> lora_enabled = std::make_shared<bool>(true);  // the adapters' switch (model/lora.h)
  // The MoE routing of the last forward that made one (model/moe.h): training forwards with autograd (its auxiliary
  // losses, and the scale the trainer sets before the backward), and every forward while record_routing is set or
  // replay_experts given. Null for a dense model.
  std::shared_ptr<MoeRouting> last_routing;
  // Routing replay and recording: with record_routing every forward, the decode step's too, keeps the experts each
  // MoE layer's router chose (chosen_experts); replay_experts [N, MoE layers, k] (an integer type; N the next
  // forwards' tokens in their order: B * T padded, the packed ones packed; -1 = the router's own choice) makes the
  // MoE layers use those experts.
  bool record_routing = false;
  torch::Tensor replay_experts;
  // The experts the last forward's routers chose (record_routing): [N, MoE layers, k] int32.
  torch::Tensor chosen_experts() const;
  // A new MoeRouting (last_routing) for a forward of an MoE model over tokens whose real ones `token_mask` marks,
  // when it trains with autograd (no cache), records or replays; else null.
  std::shared_ptr<MoeRouting> forward_routing(const torch::Tensor& token_mask, KVCache* cache);
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers;
  RMSNorm norm{nullptr};

 private:
  // Builds rotary_cos_ and rotary_sin_ on `device` for max(max_position, model.max_position_embeddings) positions,
  // unless they are there.
  void build_rotary_tables(torch::Device device, int64_t max_position);
  torch::Tensor rotary_cos_, rotary_sin_;  // [positions, Dh] float32: the tables of `rotary`, on the last device used
  torch::Tensor rotary_cos_cast_, rotary_sin_cast_;  // the same in the last other dtype asked for
};
TORCH_MODULE(Transformer);

// While alive, `module` and its children are in eval mode (LoRA's dropout off), as veRL's no-grad phases are
// (generation, validation); the mode it had is restored after.
class EvalMode {
 public:
  explicit EvalMode(torch::nn::Module& module) : module_(module), was_training_(module.is_training()) {
    module_.eval();
  }
  ~EvalMode() { module_.train(was_training_); }
  EvalMode(const EvalMode&) = delete;
  EvalMode& operator=(const EvalMode&) = delete;

 private:
  torch::nn::Module& module_;
  bool was_training_;
};

// Backbone + LM head (tied to embed_tokens when model.tie_word_embeddings).
struct CausalLMImpl : torch::nn::Module {
  // With `sink`, the model goes to it unit by unit as it is built (model/layer_shards.h).
  CausalLMImpl(const ModelConfig& config, int64_t vocab_size, UnitSink* sink = nullptr);
  // Same arguments as TransformerImpl::forward; returns logits [B, T, V] in the model dtype.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                        const torch::Tensor& attention_mask = {}, KVCache* cache = nullptr);
  torch::Tensor logits(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                       const torch::Tensor& attention_mask = {}, KVCache* cache = nullptr) {
    return forward(input_ids, position_ids, attention_mask, cache);
  }
  // hidden [..., D] -> logits [..., V]; lets callers project only the positions they need.
  torch::Tensor logits_from_hidden(const torch::Tensor& hidden);

  Transformer model{nullptr};
  torch::nn::Linear lm_head{nullptr};  // null when tied
};
TORCH_MODULE(CausalLM);

// Backbone + value_head Linear(D, 1): the critic.
struct ValueModelImpl : torch::nn::Module {
  ValueModelImpl(const ModelConfig& config, int64_t vocab_size, UnitSink* sink = nullptr);
  // Same arguments as TransformerImpl::forward; returns values [B, T] in float32.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                        const torch::Tensor& attention_mask = {}, KVCache* cache = nullptr);
  // hidden [..., D] -> values [...] in float32.
  torch::Tensor values_from_hidden(const torch::Tensor& hidden);
  // hidden [..., D] -> scores [...] in float32 by the score head of a sequence classifier: value_head's weight alone,
  // as transformers' score has no bias (ppo rm's: the bias is never read, its gradient a defined zero).
  torch::Tensor scores_from_hidden(const torch::Tensor& hidden);

  Transformer model{nullptr};
  torch::nn::Linear value_head{nullptr};
};
TORCH_MODULE(ValueModel);

// The rotary embedding's inverse frequencies [Dh / 2] (float32, on the CPU) and the factor on its cos and sin, for
// model.rope_theta, model.head_dim and model.rope_scaling (transformers' ROPE_INIT_FUNCTIONS: default, linear,
// llama3, yarn).
struct RotaryFrequencies {
  torch::Tensor inv_freq;
  double attention_factor = 1.0;
};
RotaryFrequencies rotary_frequencies(const ModelConfig& config);

// The position ids of left-padded rows: cumsum(attention_mask, 1) - 1, clamped at 0: [B, T] -> [B, T] int64.
torch::Tensor position_ids_from_mask(const torch::Tensor& attention_mask);

// Seeded initialisation of every parameter of `module` (names prefixed by `prefix`), independent of the global
// RNG and of registration order: each parameter draws from its own CPU generator seeded by hash(seed, name).
// Weights of Linear/Embedding ~ N(0, std), RMSNorm weights = 1, biases = 0.
void init_parameters(torch::nn::Module& module, const std::string& prefix, int64_t seed, double std);

// Number of scalars in the module's parameters (a tied weight counts once).
int64_t parameter_count(const torch::nn::Module& module);

}  // namespace ppo
