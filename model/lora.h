// LoRA on the models of model/transformer.h (Hu et al. 2021, arXiv:2106.09685), with PEFT's meanings and files
// (peft/tuners/lora: LoraConfig, LoraLayer.update_layer and reset_lora_parameters; PeftModel.save_pretrained's
// adapter_config.json and adapter_model.safetensors).
//
// An adapter on a linear layer W adds (alpha / rank) B A x; A [rank, in] starts Kaiming-uniform (bound 1/sqrt(in), as
// nn.init.kaiming_uniform_ with a = sqrt(5)), B [out, rank] starts at zero, so the adapted model starts equal to its
// base. In ppo.cpp an adapter is the module "<name>_lora" (a LoraAdapter, model/lora_linear.h) beside the linear
// "<name>_proj" ("model.layers.0.self_attn.q_lora.lora_A.weight"); PEFT names the same tensor
// "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight".
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "common/config.h"
#include "model/transformer.h"

namespace ppo {

// The linear layers an adapter may sit on, in Hugging Face's names; all-linear is all of them (PEFT's all-linear
// leaves out the LM head too).
const std::vector<std::string>& lora_module_names();
// `lora.target_modules` resolved (all-linear: every name), in lora_module_names' order; a UsageError naming `key`
// for a name the model lacks (wherever it stands in the list), and for rank outside [0, 2^16], alpha <= 0 or dropout
// outside [0, 1).
std::vector<std::string> lora_targets(const LoraConfig& lora, const std::string& key);
// The shape [out, in] of each linear layer an adapter may sit on, for a model of `model`'s shape.
std::map<std::string, std::pair<int64_t, int64_t>> lora_target_shapes(const ModelConfig& model);
// The stacked expert weights of an MoE layer an adapter may sit on, in PEFT's target_parameters names
// (mlp.experts.gate_up_proj, mlp.experts.down_proj; model/moe.h), and each one's [out, in] per expert.
const std::vector<std::string>& lora_expert_parameter_names();
std::map<std::string, std::pair<int64_t, int64_t>> lora_expert_shapes(const ModelConfig& model);
// `lora.target_parameters` resolved, in lora_expert_parameter_names' order: an entry names a weight as PEFT matches
// it, the whole name or a dotted suffix of it ("down_proj", "experts.down_proj"). A UsageError naming `key` for an
// entry that names none, and for dropout > 0 with any (PEFT's ParamWrapper has no dropout).
std::vector<std::string> lora_expert_targets(const LoraConfig& lora, const std::string& key);
// lora_targets and lora_expert_targets, and a rank above the smallest side of a targeted layer or expert (a rank
// beyond it adds parameters and no expressiveness), or experts targeted on a model without them, is a UsageError
// naming `key`, the layer and the largest valid rank.
void check_lora(const LoraConfig& lora, const ModelConfig& model, const std::string& key);
// The adapters' parameters on a model of `model`'s shape (0 with rank 0).
double lora_parameters(const LoraConfig& lora, const ModelConfig& model);
// A UsageError naming `key` when the float32 parameters of a model of `model`'s shape and of its adapters exceed the
// memory this process may still allocate (available_memory_bytes), before either is built.
void check_lora_fits_memory(const ModelConfig& model, int64_t vocab_size, const LoraConfig& lora,
                            const std::string& key);
// The scale of an adapter's update: alpha / rank, or alpha / sqrt(rank) with use_rslora (PEFT's LoraLayer).
double lora_scaling(const LoraConfig& lora);

// Adds adapters of `lora` (rank > 0) to the target linears of every decoder layer of `backbone`, and to the target
// expert weights of every MoE layer (an adapter of rank r E whose factors model/moe.h's expert_factors splits), in
// the model's dtype and on its device, initialised as PEFT does from `seed` (each tensor its own generator, by
// name). The adapters share one on/off switch (lora_enabled). check_lora's errors are UsageErrors naming `key`.
void add_lora(TransformerImpl& backbone, const LoraConfig& lora, const std::string& key, int64_t seed);
bool has_lora(const TransformerImpl& backbone);
// Whether an adapter of `backbone` has dropout (its training forwards draw from the device's generator).
bool has_lora_dropout(const TransformerImpl& backbone);
// Whether a parameter name is an adapter's.
bool is_lora_parameter(const std::string& name);

// While alive, the model computes its base: every adapter off (the reference policy of a LoRA actor).
class LoraDisabled {
 public:
  explicit LoraDisabled(TransformerImpl& backbone) : enabled_(backbone.lora_enabled), before_(*enabled_) {
    *enabled_ = false;
  }
  ~LoraDisabled() { *enabled_ = before_; }
  LoraDisabled(const LoraDisabled&) = delete;
  LoraDisabled& operator=(const LoraDisabled&) = delete;

 private:
  std::shared_ptr<bool> enabled_;
  bool before_;
};

// Folds every adapter into its weight (W += scaling B A, computed in float32) and turns the adapters off: the
// model is then its merged self (PEFT's merge_and_unload).
void merge_lora(TransformerImpl& backbone);

// The adapters in PEFT's layout: "base_model.model.<name>" with "<x>_lora.lora_A" -> "<x>_proj.lora_A"; an expert
// adapter is named by PEFT's nested ParamWrappers: "mlp.experts.lora_A" for the outer (down_proj where both are
// targeted, else the one), "mlp.experts.base_layer.lora_A" for gate_up_proj under down_proj's.
std::map<std::string, torch::Tensor> peft_adapter_tensors(const torch::nn::Module& model);
// Writes dir/adapter_config.json (peft_type LORA, task_type CAUSAL_LM, r, lora_alpha, use_rslora, lora_dropout,
// target_modules, target_parameters where set, bias none, base_model_name_or_path) and
// dir/adapter_model.safetensors.
void save_peft_adapter(const torch::nn::Module& model, const LoraConfig& lora, const std::string& dir,
                       const std::string& base_model_name);
// model.lora_path: reads a PEFT adapter folder into the adapters of `model` (which has them: actor.lora). Its r,
// lora_alpha, use_rslora, target_modules and target_parameters must be actor.lora's, every adapter tensor must be there
// with this model's shape, and the file may hold no other tensor; a PEFT setting that changes the maths and that
// ppo.cpp does not implement (use_dora, modules_to_save, rank_pattern, alpha_pattern, fan_in_fan_out, bias,
// layers_to_transform,
// ..., or a key PEFT 0.21 does not have) must be at its default. Otherwise a UsageError naming the file, the field
// or the tensor.
void load_peft_adapter(torch::nn::Module& model, const LoraConfig& lora, const std::string& dir);

}  // namespace ppo
