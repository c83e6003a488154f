// The model section of the configuration (model.*, with model.rope_scaling.* and model.moe.*): one schema row per key,
// as the rest of common/config.h, which includes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config_schema.h"

namespace ppo {

// Rotary scaling as transformers' rope_scaling / rope_parameters (modeling_rope_utils.py) for the types that change
// only the frequencies and their scale: linear, llama3 (Llama 3.1/3.2) and yarn (Qwen3's long-context configs).
#define PPO_ROPE_SCALING_KEYS(K)                                                                                      \
  K(std::string, rope_type, "default", names("default", "linear", "llama3", "yarn"), fixed,                           \
    "default (unscaled) | linear (positions / factor) | llama3 (low frequencies / factor, a smooth band between) | "  \
    "yarn (NTK-by-parts interpolation with an attention factor)")                                                     \
  K(double, factor, 1.0, between(1, 1e6), fixed, "linear, llama3, yarn: the context extension factor")                \
  K(double, low_freq_factor, 1.0, above(0), fixed, "llama3: wavelengths above original / low_freq_factor are scaled") \
  K(double, high_freq_factor, 4.0, above(0), fixed, "llama3: wavelengths below original / high_freq_factor are kept") \
  K(int64_t, original_max_position_embeddings, 0, between(0, k24), fixed,                                             \
    "llama3, yarn: the context the model was pretrained on (0 = model.max_position_embeddings)")                      \
  K(double, beta_fast, 32.0, above(0), fixed, "yarn: rotations where extrapolation ends")                             \
  K(double, beta_slow, 1.0, above(0), fixed, "yarn: rotations where interpolation begins")                            \
  K(double, attention_factor, 0.0, at_least(0), fixed,                                                                \
    "yarn: the scale of cos and sin (0 = 0.1 ln(factor) + 1, transformers' default)")                                 \
  K(bool, truncate, true, any(), fixed, "yarn: round the correction range to whole dimensions (transformers' default)")

struct RopeScalingConfig {
  PPO_ROPE_SCALING_KEYS(PPO_CONFIG_MEMBER)
  template <class F>
  void fields(F&& f) {
    PPO_ROPE_SCALING_KEYS(PPO_CONFIG_FIELD)
  }
};

// Mixture-of-experts MLPs as transformers' Qwen3MoeSparseMoeBlock and MixtralSparseMoeBlock
// (modeling_qwen3_moe.py, modeling_mixtral.py): a router (a bias-free linear D -> E) whose softmax in float32 picks
// each token's top-k experts, and those experts' SwiGLU MLPs weighted by their probabilities.
#define PPO_MOE_KEYS(K)                                                                                               \
  K(int64_t, num_experts, 0, between(0, 4096), fixed,                                                                 \
    "experts per MoE layer E (config.json's num_experts / num_local_experts); 0 = a dense model")                     \
  K(int64_t, num_experts_per_tok, 2, between(1, 4096), fixed, "experts each token is routed to (top-k)")              \
  K(int64_t, intermediate_size, 0, between(0, 1 << 20), fixed,                                                        \
    "width of each expert's SwiGLU MLP (Qwen3-MoE's moe_intermediate_size); 0 = model.intermediate_size (Mixtral's)") \
  K(bool, norm_topk_prob, true, any(), fixed,                                                                         \
    "renormalise the top-k probabilities to sum to 1 (Mixtral always; Qwen3-MoE's norm_topk_prob)")                   \
  K(int64_t, decoder_sparse_step, 1, between(1, 4096), fixed,                                                         \
    "layer i is an MoE layer when (i + 1) % decoder_sparse_step == 0 and i is not in mlp_only_layers")                \
  K(std::vector<int64_t>, mlp_only_layers, {}, any(), fixed, "layers that keep a dense MLP (Qwen3-MoE's)")            \
  K(double, router_aux_loss_coef, 0.001, between(0, 1e3), free,                                                       \
    "weight of transformers' load-balancing loss (load_balancing_loss_func) in the actor's loss; 0 = off")            \
  K(double, router_z_loss_coef, 0.0, between(0, 1e3), free,                                                           \
    "weight of the router z-loss (mean over tokens and MoE layers of logsumexp(router logits)^2, ST-MoE's); 0 = off")

struct MoeConfig {
  PPO_MOE_KEYS(PPO_CONFIG_MEMBER)
  template <class F>
  void fields(F&& f) {
    PPO_MOE_KEYS(PPO_CONFIG_FIELD)
  }
};

#define PPO_MODEL_KEYS(K)                                                                                              \
  K(std::string, path, "", any(), free,                                                                                \
    "Hugging Face folder (config.json + safetensors) for actor, reference and critic backbone; its config.json "       \
    "replaces the shape keys below and its tokenizer.json is used while model.tokenizer is char; "                     \
    "actor/critic.init_checkpoint wins; empty = the shape below, seeded init")                                         \
  K(std::string, tokenizer, "char", any(), free,                                                                       \
    "tokenizer: char (built-in character-level) or a folder with tokenizer.json")                                      \
  K(std::string, lora_path, "", any(), fixed,                                                                          \
    "a PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors): the actor's starting adapters "      \
    "(needs actor.lora.rank, with its rank and target modules)")                                                       \
  K(int64_t, hidden_size, 64, between(1, 1 << 18), fixed, "model width D")                                             \
  K(int64_t, num_layers, 2, between(1, 4096), fixed, "number of transformer blocks")                                   \
  K(int64_t, num_heads, 4, between(1, 4096), fixed, "query heads H")                                                   \
  K(int64_t, num_kv_heads, 2, between(1, 4096), fixed, "key/value heads (grouped-query attention); divides num_heads") \
  K(int64_t, intermediate_size, 128, between(1, 1 << 20), fixed, "SwiGLU MLP width")                                   \
  K(int64_t, vocab_size, 0, between(0, k24), fixed, "vocabulary size V; 0 = the tokenizer's size")                     \
  K(int64_t, max_position_embeddings, 256, between(1, k24), fixed, "longest sequence (prompt + response) in tokens")   \
  K(double, rope_theta, 10000.0, between(1, 1e12), fixed, "rotary position embedding base")                            \
  K(double, rms_norm_eps, 1e-6, interval(0, true, 1, false), fixed, "RMSNorm epsilon")                                 \
  K(bool, tie_word_embeddings, true, any(), fixed, "the LM head shares the token embedding matrix")                    \
  K(bool, attention_bias, false, any(), fixed, "q/k/v projections carry a bias (Qwen2 does)")                          \
  K(int64_t, head_dim, 0, between(0, 4096), fixed,                                                                     \
    "width of one attention head Dh; 0 = hidden_size / num_heads (Qwen3 and Mistral-Nemo set it: 128)")                \
  K(bool, qk_norm, false, any(), fixed, "RMSNorm over each q and k head before rotary (Qwen3's q_norm and k_norm)")    \
  K(int64_t, sliding_window, 0, between(0, k24), fixed,                                                                \
    "each token attends to the last sliding_window tokens only, itself included (Mistral); 0 = all earlier tokens")    \
  K(std::string, model_type, "auto", names("auto", "qwen2", "llama", "qwen3", "mistral", "qwen3_moe", "mixtral"),      \
    fixed,                                                                                                             \
    "the Hugging Face family of the model (config.json's model_type; what ppo export writes): auto = qwen2 with "      \
    "attention_bias, else llama")                                                                                      \
  K(std::string, dtype, "float32", names("float32", "bfloat16", "float16"), fixed, "compute dtype")                    \
  K(double, init_std, 0.02, above(0), fixed, "standard deviation of the seeded initialisation")                        \
  K(int64_t, seed, 0, any(), fixed, "initialisation seed")                                                             \
  K(bool, enable_gradient_checkpointing, false, any(), free,                                                           \
    "recompute each block's activations in the backward pass (actor and critic)")                                      \
  K(std::string, attn_implementation, "auto", names("auto", "eager", "sdpa"), free,                                    \
    "attention kernel: auto (sdpa where LibTorch >= 2.1 has it, else eager) | eager (matmul + softmax) | sdpa "        \
    "(at::scaled_dot_product_attention)")                                                                              \
  K(std::string, autocast_dtype, "none", names("none", "bfloat16", "float16"), fixed,                                  \
    "every model forward runs under autocast to this dtype (parameters keep model.dtype); none = off")

struct ModelConfig {
  PPO_MODEL_KEYS(PPO_CONFIG_MEMBER)
  RopeScalingConfig rope_scaling;
  MoeConfig moe;
  template <class F>
  void fields(F&& f) {
    PPO_MODEL_KEYS(PPO_CONFIG_FIELD)
    f("rope_scaling", rope_scaling);
    f("moe", moe);
  }
};

// The width of one attention head: model.head_dim, or hidden_size / num_heads when it is 0.
inline int64_t head_dim_of(const ModelConfig& m) {
  return m.head_dim > 0 ? m.head_dim : (m.num_heads > 0 ? m.hidden_size / m.num_heads : 0);
}

// Whether decoder layer `layer` has a mixture-of-experts MLP (transformers' Qwen3MoeDecoderLayer rule).
inline bool is_moe_layer(const ModelConfig& m, int64_t layer) {
  if (m.moe.num_experts <= 0 || (layer + 1) % m.moe.decoder_sparse_step != 0) return false;
  for (const int64_t dense : m.moe.mlp_only_layers)
    if (dense == layer) return false;
  return true;
}

// The width of one expert's MLP: model.moe.intermediate_size, or model.intermediate_size when it is 0.
inline int64_t expert_intermediate_size(const ModelConfig& m) {
  return m.moe.intermediate_size > 0 ? m.moe.intermediate_size : m.intermediate_size;
}

}  // namespace ppo
