// The memory planner (`ppo plan`): what each rank's compute device holds in each phase of a PPO step, predicted
// from the config alone (model shape, batch sizes, world size, ZeRO stage, offload and checkpointing flags), without
// building a model. All sizes are bytes per rank.
//
// What is counted, per model (actor, critic, reference, reward model, distillation's teacher): parameters, gradients
// (during the update only), AdamW's two moments (in model.dtype), the saved activations of one micro-batch's forward
// and the backward's temporaries; for the rollout the generation copy (ZeRO-3), the fused q/k/v and gate/up weights and
// the KV cache of one wave; for the no-grad phases the largest temporaries of one layer and of the LM head. The
// per-token constants were read off the code (model/transformer.cpp and attention.cpp, rollout/, workers/) and checked
// against memory/<phase>_peak_mib of real runs (docs/memory.md, "Planning memory"). Not counted: the rollout batch
// itself (host memory on a GPU; of it only the top-k distillation fields are counted, in host_bytes), the update's
// log-probs at the teacher's k tokens (k per position beside the vocabulary's V), allocator caching and
// fragmentation, the CUDA context and library workspaces.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"

namespace ppo {

struct PlanOptions {
  int64_t world_size = 1;    // W ranks of the job (check_config's; with parallel.rollout_ranks, trainers and rollout)
  double device_bytes = 0;   // memory of one device; 0 = no verdict
  int64_t zero_stage = -1;   // 0..3; -1 = parallel.zero_stage
  int64_t prompt_width = 0;  // tokens of the widest prompt; 0 = data.max_prompt_length (the most it can be)
  int64_t vocab_size = 0;    // resolved V; 0 = model.vocab_size (must then be > 0)
  bool cpu = false;          // the device is the CPU (generation lays out its float32 weights; decode/fused_weights.h)
};

// One model's state on a rank. Device and host bytes are where that state lives between phases (the phases that
// use offloaded parameters bring them to the device, and the phase peaks count that).
struct RoleMemory {
  std::string role;               // actor | critic | reference | reward_model | teacher | policy (rollout ranks)
  double parameters = 0;          // P, the whole model's
  double trained_parameters = 0;  // those with gradients and moments (LoRA: the adapters, a value head)
  double param_bytes = 0;         // P·b, or this rank's slice at ZeRO-3 (LoRA: the base stays whole)
  double grad_bytes = 0;          // during the update only: trained·b, or the slice at ZeRO-2/3
  double optimizer_bytes = 0;     // AdamW moments: 2·trained·b, or the slice at ZeRO >= 1; 0 for the ref
  double activation_bytes = 0;    // one micro-batch's forward + backward without recomputation
  double checkpointed_activation_bytes = 0;  // the same with each layer recomputed in backward
  bool checkpointing = false;                // which of the two applies (gradient checkpointing, or ZeRO-3)
  int64_t micro_batch = 0;                   // responses per micro-batch of its update (reference: of its forward)
  int64_t token_budget = 0;                  // > 0: micro-batches by this many tokens (use_dynamic_bsz)
  double device_bytes = 0;                   // parameters, gradients and moments not offloaded
  double host_bytes = 0;                     // offloaded parameters, gradients (after reduction) and moments
};

// The predicted peak of one phase of a step, with its largest parts.
struct PhaseMemory {
  std::string phase;       // startup | gen | reward_model | old_log_prob | ref | values | update_critic | update_actor
  double state_bytes = 0;  // model state on the device during the phase
  double work_bytes = 0;   // what the phase adds: activations, gradients, KV cache, temporaries
  double peak_bytes = 0;   // state + work
};

struct MemoryPlan {
  int64_t world_size = 1;
  int64_t zero_stage = 0;
  int64_t vocab_size = 0;
  int64_t sequence_length = 0;  // T = prompt width + data.max_response_length
  std::vector<RoleMemory> roles;
  double generation_copy_bytes = 0;  // ZeRO-3: the whole policy gathered for the rollout
  double fused_weight_bytes = 0;     // the q/k/v and gate/up weights fused for decoding
  double kv_cache_bytes = 0;         // one generation wave's KV cache
  int64_t generation_wave = 0;       // sequences decoded together
  std::vector<PhaseMemory> phases;   // in the order a step runs them
  std::string peak_phase;
  double peak_bytes = 0;
  double host_bytes = 0;          // offloaded state of all models; the teacher's top-k fields of the batch
  double startup_host_bytes = 0;  // the host's peak while the models are built (on a GPU; the startup phase's on a CPU)
  double device_bytes = 0;
  bool fits = true;  // peak_bytes <= device_bytes (true without a device size), the rollout ranks' too
  // With parallel.rollout_ranks: the plan above is the trainer ranks' (world_size of them; a weight_sync phase in
  // place of gen), and this the rollout ranks' (the policy, gen and weight_sync).
  std::shared_ptr<const MemoryPlan> rollout;
};

// The plan of one PPO step for `config` on options.world_size ranks (its shape: check_config's). UsageError for a
// config check_config refuses, a vocabulary size that is not known, or a zero stage outside 0..3.
MemoryPlan plan_memory(const Config& config, const PlanOptions& options);

// The largest micro-batch of `role`'s update (actor or critic) that keeps the plan's peak within the device, in
// responses (or in tokens with use_dynamic_bsz); 0 when not even one response fits. Needs options.device_bytes.
int64_t largest_micro_batch(const Config& config, const PlanOptions& options, const std::string& role);

// The smallest change that makes the plan fit, in this order of preference: parallel.zero_stage=3, one offload flag,
// model.enable_gradient_checkpointing=true, smaller micro-batches; if no single change fits, these one after another.
struct MemoryFix {
  std::vector<std::string> overrides;  // key=value, applied in order; empty when nothing fits
  MemoryPlan plan;                     // the plan with them, re-planned
};
MemoryFix suggest_memory_fix(const Config& config, const PlanOptions& options);

}  // namespace ppo
