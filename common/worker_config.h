// The parts of the configuration that the worker sections share (actor, critic, ref, reward_model): AdamW, offload and
// LoRA, one schema row per key, as the rest of common/config.h, which includes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config_schema.h"

namespace ppo {

#define PPO_OPTIM_KEYS(K)                                                                              \
  K(double, lr, 1e-4, at_least(0), fixed, "peak learning rate")                                        \
  K(double, weight_decay, 0.0, at_least(0), fixed, "AdamW decoupled weight decay")                     \
  K(std::vector<double>, betas, (std::vector<double>{0.9, 0.999}), interval(0, false, 1, true), fixed, \
    "AdamW betas [beta1, beta2]")                                                                      \
  K(double, eps, 1e-8, above(0), fixed, "AdamW epsilon")                                               \
  K(int64_t, lr_warmup_steps, 0, at_least(0), fixed, "linear warmup length in optimizer steps")        \
  K(std::string, warmup_style, "constant", registry(), fixed, "schedule after warmup:")                \
  K(double, min_lr_ratio, 0.0, between(0, 1), fixed, "cosine schedule floor as a fraction of lr")

struct OptimConfig {
  PPO_OPTIM_KEYS(PPO_CONFIG_MEMBER)
  template <class F>
  void fields(F&& f) {
    PPO_OPTIM_KEYS(PPO_CONFIG_FIELD)
  }
};

#define PPO_OFFLOAD_KEYS(K)                                                                            \
  K(bool, param, false, any(), free,                                                                   \
    "keep parameters in host memory, on the device only for the phase that needs them")                \
  K(bool, grad, false, any(), free, "move gradients to host memory after each mini-batch's reduction") \
  K(bool, optimizer, false, any(), free, "keep the optimizer state in host memory and update there")

struct OffloadConfig {
  PPO_OFFLOAD_KEYS(PPO_CONFIG_MEMBER)
  template <class F>
  void fields(F&& f) {
    PPO_OFFLOAD_KEYS(PPO_CONFIG_FIELD)
  }
};

// LoRA (Hu et al. 2021, arXiv:2106.09685) on a worker's linear layers, with veRL's and PEFT's meanings: the frozen
// weight W plus (alpha / rank) B A, A [rank, in] and B [out, rank] trained (model/lora.h).
#define PPO_LORA_KEYS(K)                                                                                        \
  K(int64_t, rank, 0, off_or(0, between(0, 65536)), fixed, "LoRA rank; 0 = off (every weight trained)")         \
  K(double, alpha, 16.0, above(0), fixed, "LoRA alpha: the adapters' update is scaled by alpha / rank")         \
  K(bool, use_rslora, false, any(), fixed,                                                                      \
    "rank-stabilised LoRA (Kalajdzievski 2023, PEFT's use_rslora): the update is scaled by alpha / sqrt(rank)") \
  K(double, dropout, 0.0, interval(0, false, 1, true), fixed,                                                   \
    "dropout on the adapters' input while training (0 = none)")                                                 \
  K(std::vector<std::string>, target_modules, {"all-linear"}, any(), fixed,                                     \
    "the linear layers that get adapters: all-linear (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "     \
    "down_proj) or a list of those names")                                                                      \
  K(std::vector<std::string>, target_parameters, {}, any(), fixed,                                              \
    "PEFT's target_parameters: the stacked expert weights of an MoE model that get adapters, each expert its "  \
    "own A [rank, in] and B [out, rank] (mlp.experts.gate_up_proj, mlp.experts.down_proj; no dropout)")         \
  K(bool, init_lora_weights, true, any(), fixed,                                                                \
    "PEFT's default: A Kaiming-uniform, B zero, so the adapted model starts equal to its base; false: B random too")

struct LoraConfig {
  PPO_LORA_KEYS(PPO_CONFIG_MEMBER)
  template <class F>
  void fields(F&& f) {
    PPO_LORA_KEYS(PPO_CONFIG_FIELD)
  }
};

}  // namespace ppo
