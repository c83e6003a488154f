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
#include "model/hf_config.h"
#include "model/hf_experts.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "text/tokenizer.h"

namespace ppo {

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
