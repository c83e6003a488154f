// See train/memory_plan.h; the terms it adds up are train/memory_formulas.h's.
#include "train/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "common/error.h"
#include "model/hf.h"
#include "model/lora.h"
#include "model/model_shape.h"
#include "model/transformer.h"
#include "rl/algorithms.h"
#include "rl/distillation.h"
#include "rollout/rollout.h"
#include "train/config_check.h"
#include "train/distillation.h"
#include "train/experience.h"
#include "train/memory_formulas.h"

namespace ppo {
namespace {

using memory::decode_buffer_work;
using memory::forward_inputs;
using memory::head_backward_work;
using memory::head_no_grad_work;
using memory::head_saved;
using memory::layer_backward_work;
using memory::layer_no_grad_work;
using memory::layer_saved;
using memory::sampling_work;
using memory::Shape;
using memory::shape_of;
using memory::Units;

// ---- the plan ----

struct Role {
  const OffloadConfig* offload = nullptr;
  Units units{};  // what is trained, or sharded at ZeRO-3: with LoRA the adapters (and a value head)
  bool trainable = false;
  bool value_head = false;
  double frozen = 0;       // with LoRA: the frozen base, whole on every rank, without gradients or moments
  double lora_tokens = 0;  // with LoRA: elements per token and layer its training forward saves besides the base's
};

struct Planner {
  const Config& config;
  const RunShape& run;  // check_config's for the plan's world size
  Shape s;
  double W;
  int64_t stage;
  double T, P, R;  // sequence, prompt and response widths
  double rows;     // responses per rank

  // ---- stage-dependent terms (ZeRO). Stage 0 is calibrated against measurement; 1-3 follow the sharding rules
  // of parallel.zero_stage and wait for their own measurements. ----

  // Parameters held between phases.
  double params_resident(const Units& u) const { return s.b * (stage == 3 ? u.slice(W) : u.total()); }
  // Gathered during a phase that runs the model (ZeRO-3: the root unit whole and one decoder layer at a time).
  double params_gathered(const Units& u) const { return stage == 3 ? s.b * (u.root + u.layer) : 0; }
  // AdamW's two moments.
  double moments(const Units& u) const { return 2 * s.b * (stage >= 1 ? u.slice(W) : u.total()); }
  // Gradients kept through the update (accumulated over micro-batches).
  double grads_resident(const Units& u) const { return s.b * (stage >= 2 ? u.slice(W) : u.total()); }
  // Gradients that exist while one micro-batch's activations do (autograd makes them as it frees activations, the
  // root unit's and the last layer's first). Stages 0 and 1: all of them when the mini-batch has several
  // micro-batches (accumulated), else those made first. Stages 2 and 3: one layer's and the root unit's, and the
  // slice the earlier micro-batches of the mini-batch summed into.
  double grads_during_backward(const Units& u, bool accumulates) const {
    if (stage < 2) return s.b * (accumulates ? u.total() : u.root + u.layer);
    return s.b * ((accumulates ? u.slice(W) : 0) + u.root + u.layer);  // the slice is summed over micro-batches
  }
  // Gradients at the end of one micro-batch's backward, before the reduction: all of them (stage 2: on top of the
  // resident slice; with recomputation, and at stage 3, only one layer's and the root unit's exist at a time).
  double grads_after_backward(const Units& u, bool recompute) const {
    if (stage < 2) return s.b * u.total();
    if (stage == 2 && !recompute) return s.b * (u.slice(W) + u.total());
    return s.b * (u.slice(W) + u.root + u.layer);
  }
  // The optimizer step's extra: stage 0 the flattened all-reduce buffer (W > 1) and AdamW's per-tensor temporaries
  // (two of the largest tensor); stages 1-3 work unit by unit: the unit's flat gradient for the reduce-scatter, its
  // flat parameters and the gathered result (stages 1 and 2), AdamW's temporaries of its slice.
  double step_work(const Units& u) const {
    if (stage == 0) return (W <= 1 ? 0 : s.b * u.total()) + 2 * s.b * u.max_tensor;
    const double unit = s.b * std::max(u.root, u.layer);
    return (stage < 3 ? 2 * unit : unit) + 2 * s.b * u.slice(W) / (s.L + 1);
  }
  bool recomputes(bool trainable) const {
    return trainable && (stage == 3 || config.model.enable_gradient_checkpointing);
  }

  // ---- activations (stage-independent, calibrated at stage 0) ----

  // One training micro-batch of `m` responses (or `tokens` tokens), forward and backward, above the state.
  // With recomputation the layers keep only their inputs; a layer's activations exist again only in its backward,
  // after the head's and the final norm's saved tensors are freed, so the two do not add up.
  double train_work(double tokens, bool recompute, bool lm_head) const {
    const double m = tokens / T;
    const double final_norm = 3 * s.b * s.D * tokens;
    const double head = lm_head ? head_saved(s) * m * R : s.b * s.D * tokens;
    const double head_backward = lm_head ? head_backward_work(s) * m * R : 0;
    const double layer_backward = layer_backward_work(s, T) * tokens;
    if (recompute) {
      const double top = final_norm + head + head_backward;
      const double layer = layer_saved(s, T) * tokens + layer_backward;
      return s.L * s.b * s.D * tokens + std::max(top, layer) + forward_inputs(s, T) * tokens;
    }
    return s.L * layer_saved(s, T) * tokens + final_norm + head + std::max(layer_backward, head_backward) +
           forward_inputs(s, T) * tokens;
  }
  // A no-grad forward over `tokens` tokens: log-probs (LM head) or values.
  double forward_work(double tokens, bool lm_head) const {
    const double m = tokens / T;
    const double head = lm_head ? head_no_grad_work(s) * m * R : 0;
    return std::max(layer_no_grad_work(s, T, /*fused=*/false) * tokens, 2 * s.b * s.D * tokens + head);
  }
  // Tokens of a micro-batch: a token budget (dynamic batch size, at most the rank's tokens) or rows × T.
  double micro_tokens(int64_t micro_rows, int64_t budget) const {
    if (budget > 0) return std::min(static_cast<double>(budget), rows * T);
    return std::min(static_cast<double>(micro_rows), rows) * T;
  }
};

// A LoRA model: the adapters (and a critic's value head, `value_head` parameters, in its root unit) are trained and
// sharded; the rest of `whole` is its frozen base, whole on every rank (workers/sharding.h).
Role lora_role(const OffloadConfig* offload, const LoraConfig& lora, const ModelConfig& m, const Shape& s,
               const Units& whole, double value_head) {
  Role r;
  r.offload = offload;
  r.trainable = true;
  r.value_head = value_head > 0;
  const double adapters = lora_parameters(lora, m) / s.L, rank = static_cast<double>(lora.rank);
  r.units = Units{adapters, value_head, s.L, std::max(value_head, rank * std::max(s.D, s.I))};
  r.frozen = whole.total() - value_head;
  // Per token and adapted layer: A's output (rank), and with dropout the dropped copy of the layer's input.
  const auto shapes = lora_target_shapes(m);
  for (const std::string& name : lora_targets(lora, "lora"))
    r.lora_tokens += rank + (lora.dropout > 0 ? static_cast<double>(shapes.at(name).second) : 0);
  // An expert adapter's A output, for each of a token's k experts, on the MoE layers' share of the layers.
  const double moe_share = static_cast<double>(moe_layer_count(m)) / static_cast<double>(m.num_layers);
  r.lora_tokens += static_cast<double>(lora_expert_targets(lora, "lora").size()) * rank *
                   static_cast<double>(m.moe.num_experts_per_tok) * moe_share;
  return r;
}

// Offload: what of a model's state lives in host memory between phases.
RoleMemory role_memory(const Planner& p, const std::string& name, const Role& r, int64_t micro, int64_t budget) {
  RoleMemory m;
  m.role = name;
  m.parameters = r.units.total() + r.frozen;
  m.trained_parameters = r.trainable ? r.units.total() : 0;
  m.param_bytes = p.params_resident(r.units) + p.s.b * r.frozen;
  m.grad_bytes = r.trainable ? p.grads_resident(r.units) : 0;
  m.optimizer_bytes = r.trainable ? p.moments(r.units) : 0;
  const double tokens = p.micro_tokens(micro, budget);
  const bool lm_head = !r.value_head;
  const double lora = p.s.b * r.lora_tokens * tokens;  // all layers' without recomputation, one layer's with it
  m.activation_bytes =
      r.trainable ? p.train_work(tokens, false, lm_head) + p.s.L * lora : p.forward_work(tokens, lm_head);
  m.checkpointed_activation_bytes = r.trainable ? p.train_work(tokens, true, lm_head) + lora : m.activation_bytes;
  m.checkpointing = p.recomputes(r.trainable);
  m.micro_batch = budget > 0 ? 0 : micro;
  m.token_budget = budget;
  const double params_host = r.offload->param ? m.param_bytes : 0;
  const double moments_host = r.offload->optimizer ? m.optimizer_bytes : 0;
  m.host_bytes = params_host + moments_host + (r.offload->grad ? m.grad_bytes : 0);
  m.device_bytes = m.param_bytes - params_host + m.optimizer_bytes - moments_host;
  return m;
}

// The models of a plan: each role's state (full or LoRA) and the rotary tables each caches on the device.
struct PlanModels {
  Role actor, critic, ref, reward_model, teacher;
  double rotary = 0;  // bytes per model that has run: float32 cos and sin of every position

  // The role of a plan's model by its name (the rollout ranks' policy is frozen and whole, as the reference).
  const Role& of(const std::string& name) const {
    return name == "actor"          ? actor
           : name == "critic"       ? critic
           : name == "reward_model" ? reward_model
           : name == "teacher"      ? teacher
                                    : ref;
  }
};

// A frozen model of its own shape beside the policy: the reward model or distillation's teacher.
struct FrozenModelShape {
  Shape s;
  Units units;
};
RoleMemory frozen_model_memory(const Planner& p, const FrozenModelShape& model, const std::string& name,
                               const Role& role, int64_t micro, int64_t budget, double T) {
  Planner in_its_shape = p;
  in_its_shape.s = model.s;
  in_its_shape.T = T;
  return role_memory(in_its_shape, name, role, micro, budget);
}

// The reward model (reward_model.enable): a frozen classifier of its own shape (its folder's config.json) placed as
// the reference is, its root unit the embeddings, final norm and score head; a micro-batch of its forward counted at
// the policy's sequence length (a response rendered again has other tokens) rounded up as packed attention's buckets
// are, as if padded (it runs packed): a bound.
std::optional<FrozenModelShape> reward_model_shape(const Config& config) {
  if (!config.reward_model.enable) return std::nullopt;
  const HfModelInfo info = read_hf_config(config.reward_model.model.path, config.model);
  FrozenModelShape r;
  r.s = shape_of(info.config, info.config.vocab_size);
  r.units = Units{r.s.layer_params, r.s.V * r.s.D + 2 * r.s.D + 1, r.s.L, r.s.max_tensor};
  return r;
}
RoleMemory reward_model_memory(const Planner& p, const FrozenModelShape& rm, const Role& role, int64_t micro) {
  // Packed, its attention runs on buckets whose length is rounded up to a multiple of 64 (plan_packed_attention).
  return frozen_model_memory(p, rm, "reward_model", role, micro, 0, 64 * std::ceil(p.T / 64));
}

// Distillation's teacher (distillation.enable): a frozen policy of its own shape (its folder's config.json, or its
// checkpoint's run config; the student's vocabulary where it names none) on the trainer ranks, placed as the
// reference is (distillation.teacher.offload; its slices at ZeRO-3); its forward over the student's sequences in
// micro-batches of distillation.teacher.log_prob_micro_batch_size_per_gpu.
std::optional<FrozenModelShape> teacher_shape(const Config& config, int64_t vocab) {
  if (!config.distillation.enable) return std::nullopt;
  const std::unique_ptr<Config> teacher = teacher_config(config);
  FrozenModelShape t;
  t.s = shape_of(teacher->model, teacher->model.vocab_size > 0 ? teacher->model.vocab_size : vocab);
  t.units = Units{t.s.layer_params, t.s.root_params, t.s.L, t.s.max_tensor};
  return t;
}
// The top-k loss modes' fields of the batch, in host memory: the teacher's k log-probs (float32) and ids (int64) of
// every response position of the rank's rows.
double teacher_topk_bytes(const Planner& p, const Config& config) {
  const DistillationConfig& d = config.distillation;
  if (!d.enable || !distill_spec(d.loss_mode).uses_topk()) return 0;
  return 12.0 * p.rows * p.R * static_cast<double>(d.topk);
}

// Each model's state and memory, into plan.roles in this order: the actor; the critic where the estimator needs one;
// the reference where a KL term needs one and the actor has no LoRA (a LoRA actor's reference is its own base).
PlanModels plan_roles(MemoryPlan& plan, const Planner& p, const Config& config, int64_t critic_micro,
                      int64_t log_prob_budget) {
  const ModelConfig& mc = config.model;
  const RunShape& d = p.run;
  const Shape& s = p.s;
  const Units policy{s.layer_params, s.root_params, s.L, s.max_tensor};
  const double critic_root = s.root_params + s.D + 1 - (mc.tie_word_embeddings ? 0 : s.V * s.D);
  const Units critic_units{s.layer_params, critic_root, s.L, s.max_tensor};
  const bool has_critic = adv_estimator(config.algorithm.adv_estimator).needs_critic;
  const bool has_ref = config.actor.use_kl_loss || config.algorithm.use_kl_in_reward;
  const bool actor_lora = config.actor.lora.rank > 0, critic_lora = config.critic.lora.rank > 0;

  const ActorConfig& a = config.actor;
  const CriticConfig& c = config.critic;
  const int64_t actor_micro = d.actor_micro_batch_size > 0 ? d.actor_micro_batch_size : a.ppo_micro_batch_size_per_gpu;
  const Role actor_role = actor_lora ? lora_role(&a.offload, a.lora, mc, s, policy, /*value_head=*/0)
                                     : Role{&a.offload, policy, true, false};
  const Role critic_role = critic_lora ? lora_role(&c.offload, c.lora, mc, s, critic_units, /*value_head=*/s.D + 1)
                                       : Role{&c.offload, critic_units, true, true};
  const Role ref_role{&config.ref.offload, policy, false, false};
  const RoleMemory actor =
      role_memory(p, "actor", actor_role, actor_micro, a.use_dynamic_bsz ? a.ppo_max_token_len_per_gpu : 0);
  plan.roles.push_back(actor);
  if (has_critic)
    plan.roles.push_back(
        role_memory(p, "critic", critic_role, critic_micro, c.use_dynamic_bsz ? c.ppo_max_token_len_per_gpu : 0));
  if (has_ref && !actor_lora)
    plan.roles.push_back(
        role_memory(p, "reference", ref_role, config.ref.log_prob_micro_batch_size_per_gpu, log_prob_budget));
  return {actor_role, critic_role, ref_role, Role{},
          Role{}};  // the frozen models of their own shapes: add_frozen_roles
}

// The frozen models of their own shapes, into models and plan.roles: the reward model where the ranks generate (beside
// rollout ranks it is theirs), and distillation's teacher. Returns the reward model's shape.
std::optional<FrozenModelShape> add_frozen_roles(MemoryPlan& plan, const Planner& p, const Config& config,
                                                 PlanModels& models, int64_t vocab, int64_t log_prob_budget) {
  const std::optional<FrozenModelShape> rm = reward_model_shape(config);
  if (rm) models.reward_model = Role{&config.reward_model.offload, rm->units, false, true};
  if (rm && p.run.rollout_ranks == 0)
    plan.roles.push_back(
        reward_model_memory(p, *rm, models.reward_model, config.reward_model.micro_batch_size_per_gpu));
  if (const std::optional<FrozenModelShape> teacher = teacher_shape(config, vocab)) {
    const DistillationTeacherConfig& t = config.distillation.teacher;
    models.teacher = Role{&t.offload, teacher->units, false, false};
    plan.roles.push_back(frozen_model_memory(p, *teacher, "teacher", models.teacher,
                                             t.log_prob_micro_batch_size_per_gpu, log_prob_budget, p.T));
  }
  return rm;
}

// State on the device during a phase: every model's resident state; a model the phase runs has its parameters
// on the device even when offloaded (and, at ZeRO-3, its gathered units).
double phase_state(const Planner& p, const MemoryPlan& plan, const PlanModels& models, const std::string& running) {
  double bytes = 0;
  for (const RoleMemory& m : plan.roles) {
    bytes += m.device_bytes + models.rotary;
    if (m.role == running) {
      // the reference's role, and the rollout ranks' policy's (whole and frozen, as the reference)
      const Role& role = models.of(m.role);
      if (role.offload->param) bytes += m.param_bytes;
      bytes += p.params_gathered(role.units);
    }
  }
  return bytes;
}

void add_phase(MemoryPlan& plan, const std::string& name, double state_bytes, double work_bytes) {
  plan.phases.push_back({name, state_bytes, work_bytes, state_bytes + work_bytes});
}

// startup, before the first step: the models built one after another, each then resting as the step finds it (its
// parameters, 1/W at ZeRO-3; offloaded ones in host memory). Building one holds at most: as a sharded build (ZeRO-3
// without LoRA) its slices and one unit whole, in float32 as built and in model.dtype; as a whole build the whole
// model and, from model.path, the folder's tensors read whole beside it (taken to be stored in model.dtype). The
// builds run in host memory: on a CPU-only machine the device's; on a GPU the device holds only what rests there,
// and the host peaks at startup_host_bytes. Then, with more than one rank, the parameter check across ranks (of the
// trained models, or the rollout ranks' policy): float64 pieces of a tensor (at most 2^18 elements, four at a time),
// and at ZeRO-3 one unit gathered.
void add_startup_phase(MemoryPlan& plan, const Planner& p, const Config& config, const PlanOptions& options,
                       const PlanModels& models) {
  const Shape& s = p.s;
  double on_device = 0, on_host = 0, build = 0, check = 0;
  for (const RoleMemory& m : plan.roles) {
    const Role& role = models.of(m.role);
    const double rest_device = role.offload->param ? 0 : m.param_bytes;
    (role.offload->param ? on_host : on_device) += m.param_bytes;
    const double whole = s.b * (role.units.total() + role.frozen);
    const double unit = (s.b + (s.b != 4 ? 4 : 0)) * std::max(role.units.root, role.units.layer);
    const bool sharded_build = p.stage == 3 && role.frozen == 0;
    const bool from_folder = !config.model.path.empty() || m.role == "reward_model" || m.role == "teacher";
    const double peak = sharded_build ? m.param_bytes + unit : whole + (from_folder ? whole : 0);
    build = std::max(build, peak - rest_device);
    if (p.W > 1 && m.role != "reference" && m.role != "reward_model" && m.role != "teacher")
      check = std::max(check, 32 * std::min(s.max_tensor, static_cast<double>(1 << 18)) +
                                  (p.stage == 3 ? s.b * std::max(role.units.root, role.units.layer) : 0));
  }
  add_phase(plan, "startup", on_device, std::max(options.cpu ? build : 0, check));
  plan.startup_host_bytes = on_host + build;
}

// gen: the KV cache of one wave (decode/continuous_decoder.cpp: S slots × the cache width of decode_cache_width),
// the fused weights, the decode step's buffers, the prefill of the wave's prompts or the sampling of one step; at
// ZeRO-3 the whole policy is gathered into a generation copy for the rollout (and the resident slice stays).
void add_generation_phase(MemoryPlan& plan, const Planner& p, const Config& config, const PlanOptions& options,
                          const PlanModels& models, int64_t prompt) {
  const ModelConfig& mc = config.model;
  const Shape& s = p.s;
  const bool actor_lora = config.actor.lora.rank > 0;
  const int64_t wave = std::min<int64_t>(generation_wave_size(config, prompt), static_cast<int64_t>(p.rows));
  const double S = static_cast<double>(wave);
  plan.generation_wave = wave;
  plan.kv_cache_bytes = kv_cache_bytes(
      mc, decode_cache_width(prompt, config.data.max_response_length, config.rollout.multi_turn.enable), wave);
  // Fused q/k/v and gate/up always; o and down too, and the LM head, when they are cast to the autocast dtype,
  // packed (float32 on the CPU) or (o and down) LoRA merges into them (fuse_projection; rollout's head_).
  const bool cast = mc.autocast_dtype != "none" && mc.autocast_dtype != mc.dtype;
  const double cb = cast ? 2 : s.b;  // bytes per element of the dtype the decode step's matmuls run in
  const bool packed = options.cpu && cb == 4;
  const double copied_o_down = cast || packed || actor_lora ? s.Q * s.D + s.I * s.D : 0;
  plan.fused_weight_bytes =
      cb * s.L * (s.D * (s.Q + 2 * s.kv) + (mc.attention_bias ? s.Q + 2 * s.kv : 0) + 2 * s.I * s.D + copied_o_down) +
      (cast || packed ? cb * s.V * s.D : 0);
  plan.generation_copy_bytes = p.stage == 3 ? s.b * models.actor.units.total() : 0;
  const double prefill = layer_no_grad_work(s, p.P, /*fused=*/true) * S * p.P;
  const double sampling = sampling_work(s) * S;
  double gen_state = 0;
  for (const RoleMemory& m : plan.roles) gen_state += m.device_bytes + models.rotary;
  if (config.actor.offload.param) gen_state += plan.roles.front().param_bytes;  // plan.roles starts with the actor
  add_phase(plan, "gen", gen_state,
            plan.generation_copy_bytes + plan.fused_weight_bytes + plan.kv_cache_bytes + decode_buffer_work(s, cb) * S +
                std::max(prefill, sampling));
}

// Trainer ranks beside rollout ranks (parallel.rollout_ranks) do not generate: after each step they send the
// weights, gathering the whole policy at ZeRO-3 (the generation copy), the first trainer flattening what it sends
// (the trained tensors) into one buffer.
void add_weight_sync_phase(MemoryPlan& plan, const Planner& p, const PlanModels& models) {
  const double sent = p.s.b * models.actor.units.total();
  plan.generation_copy_bytes = p.stage == 3 ? sent : 0;
  add_phase(plan, "weight_sync", phase_state(p, plan, models, "actor"), plan.generation_copy_bytes + sent);
}

// reward_model: the reward model's forward over one micro-batch, on the ranks that generate.
void add_reward_model_phase(MemoryPlan& plan, const Planner& p, const PlanModels& models) {
  for (const RoleMemory& m : plan.roles)
    if (m.role == "reward_model")
      add_phase(plan, "reward_model", phase_state(p, plan, models, "reward_model"), m.activation_bytes);
}

// The rollout ranks: the policy whole and frozen (placed as ref.offload says), the generation of their share of the
// step's prompts (the whole batch over parallel.rollout_ranks, padded), and the weight sync's receive buffer.
std::shared_ptr<const MemoryPlan> plan_rollout_ranks(const Config& config, const PlanOptions& options,
                                                     const Planner& trainers, const PlanModels& models,
                                                     const std::optional<FrozenModelShape>& rm, int64_t prompt) {
  const int64_t ranks = trainers.run.rollout_ranks;
  Config rollout = config;
  rollout.actor.offload = config.ref.offload;
  const int64_t prompts = (config.data.train_batch_size + ranks - 1) / ranks;
  Planner p{rollout,
            trainers.run,
            trainers.s,
            static_cast<double>(ranks),
            0,
            trainers.T,
            trainers.P,
            trainers.R,
            static_cast<double>(prompts * config.rollout.n)};
  auto plan = std::make_shared<MemoryPlan>();
  plan->world_size = ranks;
  plan->vocab_size = static_cast<int64_t>(p.s.V);
  plan->sequence_length = static_cast<int64_t>(p.T);
  RoleMemory policy;
  policy.role = "policy";
  policy.parameters = models.actor.frozen + models.actor.units.total();
  policy.param_bytes = p.s.b * policy.parameters;
  (rollout.actor.offload.param ? policy.host_bytes : policy.device_bytes) = policy.param_bytes;
  plan->roles = {policy};
  if (rm)
    plan->roles.push_back(
        reward_model_memory(p, *rm, models.reward_model, config.reward_model.micro_batch_size_per_gpu));
  for (const RoleMemory& m : plan->roles) plan->host_bytes += m.host_bytes;
  add_startup_phase(*plan, p, rollout, options, models);
  add_generation_phase(*plan, p, rollout, options, models, prompt);
  add_reward_model_phase(*plan, p, models);
  add_phase(*plan, "weight_sync", policy.device_bytes + models.rotary, p.s.b * models.actor.units.total());
  for (const PhaseMemory& ph : plan->phases)
    if (ph.peak_bytes > plan->peak_bytes) plan->peak_bytes = ph.peak_bytes, plan->peak_phase = ph.phase;
  plan->device_bytes = options.device_bytes;
  plan->fits = options.device_bytes <= 0 || plan->peak_bytes <= options.device_bytes;
  return plan;
}

// The updates, the critic's first: the resident state, and the larger of one micro-batch's forward and backward
// with the gradients that exist meanwhile, or the optimizer step with all of them.
void add_update_phases(MemoryPlan& plan, const Planner& p, const Config& config, const PlanModels& models) {
  const RunShape& d = p.run;
  const Shape& s = p.s;
  for (const std::string name : {"critic", "actor"}) {
    for (const RoleMemory& m : plan.roles) {
      if (m.role != name) continue;
      const Role& role = name == "actor" ? models.actor : models.critic;
      const int64_t micro_batches = name == "actor" ? d.actor_micro_batches : d.critic_micro_batches;
      const double mini_tokens =
          static_cast<double>(name == "actor" ? d.actor_mini_prompts_per_rank : d.critic_mini_prompts_per_rank) *
          static_cast<double>(config.rollout.n) * p.T;
      const bool accumulates = m.token_budget > 0 ? m.token_budget < mini_tokens : micro_batches > 1;
      const double activations = m.checkpointing ? m.checkpointed_activation_bytes : m.activation_bytes;
      const double backward = p.grads_during_backward(role.units, accumulates) + activations;
      // offload.grad moves the gradients to host memory after the reduction; the step streams them back one by one.
      const double step = m.grad_bytes + (role.offload->grad ? 2 * s.b * s.max_tensor : p.step_work(role.units));
      add_phase(plan, "update_" + name, phase_state(p, plan, models, name),
                std::max({backward, p.grads_after_backward(role.units, m.checkpointing), step}));
    }
  }
}

}  // namespace

MemoryPlan plan_memory(const Config& config, const PlanOptions& options) {
  const ModelConfig& mc = config.model;
  const RunShape d = check_config(config, options.world_size);
  const int64_t vocab = options.vocab_size > 0 ? options.vocab_size : mc.vocab_size;
  usage_check(vocab > 0,
              "model.vocab_size is 0 (the tokenizer's size) and no tokenizer or config.json gave it: set "
              "model.vocab_size, or model.path to a Hugging Face folder");
  validate_model_config(mc, vocab);
  const int64_t stage = options.zero_stage >= 0 ? options.zero_stage : config.parallel.zero_stage;
  usage_check(options.world_size >= 1, "the world size must be >= 1, got " + std::to_string(options.world_size));

  // With rollout ranks, the trainers are the ranks that shard and train (options.world_size is the job's).
  const int64_t trainers = d.rollout_ranks > 0 ? d.world_size : options.world_size;
  Planner p{config, d, shape_of(mc, vocab), static_cast<double>(trainers), stage, 0, 0, 0, 0};
  const int64_t prompt = options.prompt_width > 0 ? options.prompt_width : config.data.max_prompt_length;
  p.P = static_cast<double>(prompt);
  p.R = static_cast<double>(config.data.max_response_length);
  p.T = p.P + p.R;
  p.rows = static_cast<double>(std::max<int64_t>(1, d.responses_per_rank));
  const Shape& s = p.s;
  const bool has_ref = config.actor.use_kl_loss || config.algorithm.use_kl_in_reward;
  const bool actor_lora = config.actor.lora.rank > 0;

  MemoryPlan plan;
  plan.world_size = trainers;
  plan.zero_stage = stage;
  plan.vocab_size = vocab;
  plan.sequence_length = static_cast<int64_t>(p.T);
  plan.device_bytes = options.device_bytes;

  const int64_t critic_micro = d.critic_micro_batch_size;
  const RolloutConfig& r = config.rollout;
  const int64_t log_prob_budget = r.log_prob_use_dynamic_bsz ? r.log_prob_max_token_len_per_gpu : 0;
  PlanModels models = plan_roles(plan, p, config, critic_micro, log_prob_budget);
  const std::optional<FrozenModelShape> rm = add_frozen_roles(plan, p, config, models, vocab, log_prob_budget);
  // The rotary tables each model caches on the device once it has run (float32 cos and sin of every position).
  models.rotary = 8 * s.Dh * static_cast<double>(std::max<int64_t>(mc.max_position_embeddings, plan.sequence_length));
  const auto state = [&](const std::string& running) { return phase_state(p, plan, models, running); };

  add_startup_phase(plan, p, config, options, models);
  if (d.rollout_ranks > 0)
    add_weight_sync_phase(plan, p, models);
  else
    add_generation_phase(plan, p, config, options, models, prompt);
  add_reward_model_phase(plan, p, models);
  add_phase(plan, "old_log_prob", state("actor"),
            p.forward_work(p.micro_tokens(r.log_prob_micro_batch_size_per_gpu, log_prob_budget), true));
  for (const RoleMemory& m : plan.roles)  // in the step's order: ref, then values
    if (m.role == "reference") add_phase(plan, "ref", state("reference"), m.activation_bytes);
  if (has_ref && actor_lora)  // the actor's base, adapters off
    add_phase(plan, "ref", state("actor"),
              p.forward_work(p.micro_tokens(config.ref.log_prob_micro_batch_size_per_gpu, log_prob_budget), true));
  for (const RoleMemory& m : plan.roles)  // then the teacher, then values
    if (m.role == "teacher") add_phase(plan, "teacher", state("teacher"), m.activation_bytes);
  for (const RoleMemory& m : plan.roles)
    if (m.role == "critic")
      add_phase(plan, "values", state("critic"), p.forward_work(p.micro_tokens(critic_micro, m.token_budget), false));
  add_update_phases(plan, p, config, models);
  for (const RoleMemory& m : plan.roles) plan.host_bytes += m.host_bytes;
  plan.host_bytes += teacher_topk_bytes(p, config);
  for (const PhaseMemory& ph : plan.phases)
    if (ph.peak_bytes > plan.peak_bytes) plan.peak_bytes = ph.peak_bytes, plan.peak_phase = ph.phase;
  plan.fits = options.device_bytes <= 0 || plan.peak_bytes <= options.device_bytes;
  if (d.rollout_ranks > 0) {
    plan.rollout = plan_rollout_ranks(config, options, p, models, rm, prompt);
    plan.fits = plan.fits && plan.rollout->fits;
  }
  return plan;
}

}  // namespace ppo
