// Hugging Face interop: read a `Qwen2ForCausalLM`, `Qwen3ForCausalLM`, `LlamaForCausalLM`, `MistralForCausalLM`,
// `Qwen3MoeForCausalLM` or `MixtralForCausalLM` folder (config.json + safetensors; experts as model/hf_experts.h maps
// them) into the model of model/transformer.h, and write one back that
// `transformers.AutoModelForCausalLM.from_pretrained` loads. Field meanings follow transformers' Qwen2Config,
// Qwen3Config, LlamaConfig and MistralConfig (configuration_*.py) and modeling_rope_utils.py;
// a folder is laid out as PreTrainedModel.save_pretrained writes it (config.json, model.safetensors or
// model-0000i-of-0000N.safetensors + model.safetensors.index.json, generation_config.json, tokenizer files).
// Every problem with a folder throws UsageError naming the file and the field or tensor.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "model/hf_experts.h"
#include "model/safetensors.h"
#include "model/tokenizer.h"
#include "model/transformer.h"

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

struct HfLoadResult {
  std::vector<std::string>
      kept_init;                    // absent from the folder, kept their init (value_head.* only; registration order)
  std::vector<std::string> unused;  // tensors of the folder no parameter takes (rotary inv_freq, a critic's lm_head)
};

// Copies the safetensors of `dir` (load_safetensors_dir) into the parameters of `module` by name, converting to
// each parameter's dtype (and device). `module` is a CausalLMImpl (every parameter must be in the folder; a tied
// model has no lm_head.weight to find) or a ValueModelImpl (the "model." backbone from the folder; with
// allow_missing_value_head the critic's value_head.* may be absent and keeps its seeded init; a sequence classifier's
// score.weight is the value head's weight, its bias zero). A folder saved from
// the bare backbone (names without "model.") is accepted too. Nothing is modified unless every check passes; a
// missing tensor or a shape mismatch throws UsageError naming the tensor and the expected and found shapes.
HfLoadResult load_hf_weights(torch::nn::Module& module, const std::string& dir, bool allow_missing_value_head);

// A Hugging Face folder read a part of a parameter at a time (ZeRO-3's sharded loading, workers/sharding.h): the
// headers are read and checked when it opens, and each part reads only its own bytes. Names, shapes and dtypes are
// checked as load_hf_weights checks them, one parameter at a time; a sequence classifier's score.weight is the value
// head's weight, its bias zero, as there; a folder with q/k norms for a model without them (`qk_norm` false) is
// refused when it opens, as load_hf_weights refuses it.
class HfWeightParts {
 public:
  HfWeightParts(const std::string& dir, bool allow_missing_value_head, bool qk_norm);
  // UsageError unless the folder has parameter `name` (`param`, with its initial values) in its shape as a floating
  // type, or it is a value head the folder may lack. Every rank checks every parameter, so that all fail alike.
  void check(const std::string& name, const torch::Tensor& param) const;
  // Elements [first, first + count) of parameter `name` (flat, row-major; checked) in the dtype of `param`: read
  // from the folder, or `param`'s own for a value head the folder lacks.
  torch::Tensor part(const std::string& name, const torch::Tensor& param, int64_t first, int64_t count) const;

 private:
  std::string stored_name(const std::string& name) const;  // the name in the folder
  // The folder's tensors of parameter `name` (stored_pieces, under their names in the folder).
  std::vector<StoredPiece> pieces(const std::string& name, const torch::Tensor& param) const;

  std::string dir_;
  SafetensorsReader reader_;
  bool allow_missing_value_head_;
  bool strip_model_;  // a bare backbone's folder: its names lack "model."
  bool score_head_;   // a sequence classifier's folder: score.weight, and no value_head of its own
};

// Writes a folder that transformers loads as it is:
//   config.json             the architecture of model.model_type (resolved_model_type), the fields read_hf_config
//                           reads (rope_scaling null when unscaled), torch_dtype of the parameters ("float32" / ...)
//   model.safetensors       or, above max_shard_bytes, model-0000i-of-0000N.safetensors + model.safetensors.index.json
//                           (metadata {"format": "pt"}, as transformers requires; stale weight files are removed)
//   generation_config.json  bos / eos / pad token ids of `tokenizer` (those it has)
//   tokenizer files         tokenizer.json, tokenizer_config.json, special_tokens_map.json, vocab.json, merges.txt,
//                           added_tokens.json, chat_template.jinja: those present in `tokenizer_dir` (a folder, or a
//                           tokenizer.json whose folder holds the rest); for the built-in char tokenizer
//                           (tokenizer_dir "char") a note, char_tokenizer.txt, saying so
// Vocabulary size and tying are taken from `model`; the other fields from `config`.
// UsageError "<context>: model.<key> is <expected's> but <found_text> <found's>" for the first shape field (sizes,
// heads, head_dim, biases, qk_norm, sliding window) where `found` differs from `expected`.
void check_same_shape(const ModelConfig& expected, const ModelConfig& found, const std::string& context,
                      const std::string& found_text);

// Whether a file called `name` is one export_hf writes: what `ppo export --force` may replace.
bool is_hf_export_file(const std::string& name);

void export_hf(const CausalLM& model, const ModelConfig& config, const std::string& out_dir, const Tokenizer& tokenizer,
               const std::string& tokenizer_dir, uint64_t max_shard_bytes = 5ull << 30);
// A reward model (ppo rm's ValueModel, scored by ValueModelImpl::scores_from_hidden) as export_hf writes a policy, but
// as the family's *ForSequenceClassification (hf_config_json's `classifier`): value_head.weight as score.weight
// [1, D], no lm_head; the value head's bias, which that score never reads, is left out.
void export_hf_classifier(const ValueModel& model, const ModelConfig& config, const std::string& out_dir,
                          const Tokenizer& tokenizer, const std::string& tokenizer_dir,
                          uint64_t max_shard_bytes = 5ull << 30);

}  // namespace ppo
