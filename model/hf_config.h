// config.json of Hugging Face folders (model/hf.h): read into a ModelConfig (read_hf_config, resolve_model_path) and
// written as export_hf writes it (hf_config_json).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "text/tokenizer.h"

namespace ppo {

// What config.json says, beyond the shape.
struct HfModelInfo {
  ModelConfig config;                  // the shape from config.json; path, tokenizer, dtype, seed... from `base`
  std::string architecture;            // "Qwen2ForCausalLM" | "Qwen3ForCausalLM" | "LlamaForCausalLM" | ...
  std::string torch_dtype;             // the stored dtype as config.json names it ("bfloat16"...); "" when absent
  int64_t bos_token_id = -1;           // -1 when absent or null
  std::vector<int64_t> eos_token_ids;  // config.json's eos_token_id (a number or a list); empty when absent
  int64_t pad_token_id = -1;           // -1 when absent or null
  bool sequence_classifier = false;    // a *ForSequenceClassification folder (a reward model: score.weight, no lm_head)
  int64_t num_labels = 2;              // transformers' count: id2label's size, else num_labels, else 2
};

// Reads dir/config.json of one of those families ("architectures" and "model_type", either may be absent, must agree;
// model.model_type is set; the architecture may be the family's *ForSequenceClassification, a reward model). Mapping:
// hidden_size, intermediate_size, num_hidden_layers -> num_layers, num_attention_heads -> num_heads,
// num_key_value_heads -> num_kv_heads (default: num_heads), head_dim (Qwen3's default 128, the others' hidden_size /
// heads), rms_norm_eps, rope_theta, rope_scaling or rope_parameters (default, linear, llama3, yarn) ->
// model.rope_scaling, vocab_size, max_position_embeddings, tie_word_embeddings (default false), attention_bias (always
// true for Qwen2, never for Mistral, the field otherwise), q/k norms (Qwen3), sliding_window (Mistral: default 4096,
// null for none), the experts of Qwen3-MoE and Mixtral (model.moe.*: num_experts or num_local_experts,
// num_experts_per_tok, moe_intermediate_size, norm_topk_prob, decoder_sparse_step, mlp_only_layers; the loss
// coefficients stay the run's). Refused, naming the field: Gemma 3, shared experts (Qwen2-MoE), routers other than
// softmax top-k, router_jitter_noise, other rope types, partial rotary
// factors, activations other than silu, mlp_bias, logit soft-capping, layer types other than full_attention, sliding
// windows outside Mistral. Every other ModelConfig field (dtype, seed, gradient checkpointing, path, tokenizer) is kept
// from `base`. The result passes validate_model_config.
HfModelInfo read_hf_config(const std::string& dir, const ModelConfig& base);
ModelConfig model_config_from_hf(const std::string& dir, const ModelConfig& base);

// model.path: when set, replaces the shape fields of `model` by those of <model.path>/config.json
// (model_config_from_hf; vocab_size included), and, when model.tokenizer is still "char" (its default) and the folder
// holds a tokenizer.json, sets model.tokenizer to the folder. An explicit model.tokenizer (a tokenizer.json or a
// folder) is kept. A sequence classifier's folder (a reward model) is refused. Does nothing when model.path is empty.
// Commands call it once, right after loading the config, so that validation, the run's config.yaml and every model
// built see the Hugging Face shape; the weights are copied by the Actor and Critic constructors (load_hf_weights),
// unless an init_checkpoint is given.
void resolve_model_path(ModelConfig& model);

// The fields transformers' configuration class of the family (model_type resolved from `c`) writes, with the shape
// of `c`, `vocab_size` tokens, tied or untied embeddings, the stored dtype's name, and the tokenizer's BOS and EOS.
// `classifier`: the family's *ForSequenceClassification with one label, and pad_token_id the tokenizer's pad (none
// when that is EOS: transformers scores the last token that is not pad_token_id, and a response ends in EOS).
nlohmann::json hf_config_json(const ModelConfig& c, int64_t vocab_size, bool tied, const std::string& dtype,
                              const Tokenizer& tokenizer, bool classifier = false);

}  // namespace ppo
