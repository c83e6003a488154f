// ppo plan: see app/plan.h.
#include "app/plan.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "common/error.h"
#include "common/strings.h"
#include "model/model_shape.h"
#include "model/transformer.h"
#include "text/tokenizers.h"
#include "train/config_check.h"
#include "train/memory_plan.h"

namespace ppo {

double parse_bytes(const std::string& text, const std::string& flag) {
  const std::string hint = flag + " '" + text + "' is not a memory size such as 80GB, 80GiB, 512MiB or 85899345920";
  size_t end = 0;
  double number = 0;
  try {
    number = std::stod(text, &end);
  } catch (const std::exception&) {
    throw UsageError(hint);
  }
  std::string unit;
  for (size_t i = end; i < text.size(); ++i)
    if (!std::isspace(static_cast<unsigned char>(text[i]))) unit += static_cast<char>(std::tolower(text[i]));
  const std::pair<const char*, double> units[] = {
      {"", 1},      {"b", 1},         {"kb", 1e3},      {"mb", 1e6},      {"gb", 1e9},
      {"tb", 1e12}, {"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1099511627776.0}};
  constexpr double kMost = 1152921504606846976.0;  // 1 EiB (2^60 bytes): far beyond any device, and exact
  for (const auto& [name, scale] : units)
    if (unit == name) {
      const double bytes = number * scale;
      usage_check(std::isfinite(number) && bytes >= 1 && bytes <= kMost,
                  flag + " '" + text + "' must be a size from 1 byte to 1 EiB (2^60 bytes)");
      return bytes;
    }
  throw UsageError(hint);
}

namespace {

// The largest --world-size (the sharded optimizer state's bound too) and --prompt-length (data.max_prompt_length's).
constexpr int64_t kMaxPlanWorldSize = int64_t{1} << 20;
constexpr int64_t kMaxPlanPromptLength = int64_t{1} << 22;

std::string size_text(double bytes) {
  char text[32];
  const double kib = 1024, mib = kib * 1024, gib = mib * 1024;
  if (bytes >= 10 * gib)
    std::snprintf(text, sizeof text, "%.2f GiB", bytes / gib);
  else if (bytes >= 100 * mib)
    std::snprintf(text, sizeof text, "%.1f MiB", bytes / mib);
  else if (bytes >= mib)
    std::snprintf(text, sizeof text, "%.2f MiB", bytes / mib);
  else
    std::snprintf(text, sizeof text, "%.1f KiB", bytes / kib);
  return text;
}

std::string count_text(double n) {
  char text[32];
  if (n >= 1e9)
    std::snprintf(text, sizeof text, "%.2fB", n / 1e9);
  else if (n >= 1e6)
    std::snprintf(text, sizeof text, "%.2fM", n / 1e6);
  else
    std::snprintf(text, sizeof text, "%.0f", n);
  return text;
}

// The resolved vocabulary: model.vocab_size, or the tokenizer's size when that is 0.
int64_t plan_vocab_size(const Config& config) {
  if (config.model.vocab_size > 0) return config.model.vocab_size;
  try {
    return make_tokenizer(config.model.tokenizer)->vocab_size();
  } catch (const UsageError& e) {
    throw UsageError("model.vocab_size is 0 (the tokenizer's size) and model.tokenizer=" + config.model.tokenizer +
                     " could not be read (" + e.what() + "): set model.vocab_size, or model.path to a Hugging Face " +
                     "folder whose config.json gives it");
  }
}

// The table of a plan's phases: state, work and peak, the peak marked.
void print_phases(const MemoryPlan& plan) {
  std::printf("%-14s %11s %11s %11s\n", "phase", "state", "work", "peak");
  for (const PhaseMemory& p : plan.phases)
    std::printf("%-14s %11s %11s %11s%s\n", p.phase.c_str(), size_text(p.state_bytes).c_str(),
                size_text(p.work_bytes).c_str(), size_text(p.peak_bytes).c_str(),
                p.phase == plan.peak_phase ? "  <- peak" : "");
}

void print_plan(const MemoryPlan& plan, const Config& config) {
  const ModelConfig& m = config.model;
  std::printf(
      "model: %lld layers, width %lld, %lld/%lld heads of %lld, SwiGLU %lld, vocab %lld, %s; sequence %lld "
      "tokens\n",
      static_cast<long long>(m.num_layers), static_cast<long long>(m.hidden_size), static_cast<long long>(m.num_heads),
      static_cast<long long>(m.num_kv_heads), static_cast<long long>(head_dim_of(m)),
      static_cast<long long>(m.intermediate_size), static_cast<long long>(plan.vocab_size), m.dtype.c_str(),
      static_cast<long long>(plan.sequence_length));
  if (m.moe.num_experts > 0)
    std::printf("experts: %lld in each of %lld MoE layers, top-%lld, SwiGLU %lld; %s parameters, %s active per token\n",
                static_cast<long long>(m.moe.num_experts), static_cast<long long>(moe_layer_count(m)),
                static_cast<long long>(m.moe.num_experts_per_tok), static_cast<long long>(expert_intermediate_size(m)),
                count_text(model_parameters(m, plan.vocab_size)).c_str(),
                count_text(model_parameters(m, plan.vocab_size, /*active=*/true)).c_str());
  std::printf("per rank of %lld, ZeRO stage %lld, gradient checkpointing %s\n\n",
              static_cast<long long>(plan.world_size), static_cast<long long>(plan.zero_stage),
              m.enable_gradient_checkpointing ? "on" : "off");
  std::printf("%-12s %10s %11s %11s %11s %24s %11s %11s\n", "model", "parameters", "params", "grads", "optimizer",
              "activations (ckpt)", "device", "host");
  for (const RoleMemory& r : plan.roles) {
    const std::string activations = size_text(r.activation_bytes) + " (" + size_text(r.checkpointed_activation_bytes) +
                                    ")" + (r.checkpointing ? "*" : " ");
    std::printf("%-12s %10s %11s %11s %11s %24s %11s %11s\n", r.role.c_str(), count_text(r.parameters).c_str(),
                size_text(r.param_bytes).c_str(), size_text(r.grad_bytes).c_str(), size_text(r.optimizer_bytes).c_str(),
                activations.c_str(), size_text(r.device_bytes).c_str(), size_text(r.host_bytes).c_str());
  }
  for (const RoleMemory& r : plan.roles)
    if (r.trained_parameters > 0 && r.trained_parameters < r.parameters)
      std::printf("%s: LoRA, %s trained parameters (adapters%s); the frozen base has no gradients or moments%s\n",
                  r.role.c_str(), count_text(r.trained_parameters).c_str(), r.role == "critic" ? ", value head" : "",
                  r.role == "actor" ? " and is the reference" : "");
  std::printf(
      "(activations: one micro-batch, forward and backward for actor and critic, the forward for the "
      "reference and the reward model;\n * = applies: recomputed in backward; grads exist during the update only)\n");
  if (plan.rollout)
    std::printf("no rollout here: rollout ranks generate (below)");
  else
    std::printf("rollout: waves of %lld sequences, KV cache %s, fused weights %s",
                static_cast<long long>(plan.generation_wave), size_text(plan.kv_cache_bytes).c_str(),
                size_text(plan.fused_weight_bytes).c_str());
  if (plan.generation_copy_bytes > 0)
    std::printf(", %s copy %s", plan.rollout ? "weight-sync" : "generation",
                size_text(plan.generation_copy_bytes).c_str());
  std::printf("\n\n");
  print_phases(plan);
  std::printf("host memory (offloaded state): %s; at start-up, while the models are built there: %s\n",
              size_text(plan.host_bytes).c_str(), size_text(plan.startup_host_bytes).c_str());
  if (!plan.rollout) return;
  const MemoryPlan& r = *plan.rollout;
  std::printf(
      "\nrollout ranks (parallel.rollout_ranks=%lld; the plan above is the %lld trainer ranks'): the policy %s "
      "(%s parameters, frozen), waves of %lld sequences, KV cache %s, fused weights %s\n",
      static_cast<long long>(r.world_size), static_cast<long long>(plan.world_size),
      size_text(r.roles.front().param_bytes).c_str(), count_text(r.roles.front().parameters).c_str(),
      static_cast<long long>(r.generation_wave), size_text(r.kv_cache_bytes).c_str(),
      size_text(r.fused_weight_bytes).c_str());
  print_phases(r);
  std::printf("rollout ranks' host memory (offloaded policy): %s\n", size_text(r.host_bytes).c_str());
}

}  // namespace

int run_plan(const Config& config, const PlanCommandOptions& options) {
  usage_check(options.world_size >= 1 && options.world_size <= kMaxPlanWorldSize,
              "--world-size=" + std::to_string(options.world_size) + " is out of range: 1 to " +
                  std::to_string(kMaxPlanWorldSize));
  usage_check(options.prompt_length >= 0 && options.prompt_length <= kMaxPlanPromptLength,
              "--prompt-length=" + std::to_string(options.prompt_length) +
                  " is out of range: 0 (data.max_prompt_length) to " + std::to_string(kMaxPlanPromptLength));
  PlanOptions plan_options;
  plan_options.world_size = options.world_size;
  if (!options.device_memory.empty()) plan_options.device_bytes = parse_bytes(options.device_memory, "--device-memory");
  plan_options.prompt_width = options.prompt_length;
  plan_options.vocab_size = plan_vocab_size(config);
  const MemoryPlan plan = plan_memory(config, plan_options);
  print_plan(plan, config);
  if (plan_options.device_bytes <= 0) {
    std::printf("peak: %s in %s (give --device-memory for a verdict)\n", size_text(plan.peak_bytes).c_str(),
                plan.peak_phase.c_str());
    if (plan.rollout)
      std::printf("rollout ranks' peak: %s in %s\n", size_text(plan.rollout->peak_bytes).c_str(),
                  plan.rollout->peak_phase.c_str());
    return 0;
  }
  std::printf("peak: %s in %s, device %s: %s\n", size_text(plan.peak_bytes).c_str(), plan.peak_phase.c_str(),
              size_text(plan_options.device_bytes).c_str(), plan.fits ? "fits" : "DOES NOT FIT");
  if (plan.rollout)
    std::printf("rollout ranks' peak: %s in %s: %s\n", size_text(plan.rollout->peak_bytes).c_str(),
                plan.rollout->peak_phase.c_str(), plan.rollout->fits ? "fits" : "DOES NOT FIT");
  for (const RoleMemory& r : plan.roles) {
    if (r.trained_parameters == 0) continue;  // a frozen model has no update micro-batch
    const int64_t largest = largest_micro_batch(config, plan_options, r.role);
    const bool tokens = r.token_budget > 0;
    std::printf("largest %s micro-batch that fits: %s\n", r.role.c_str(),
                largest == 0
                    ? "none (not even one sequence)"
                    : (std::to_string(largest) + (tokens ? " tokens (" + r.role + ".ppo_max_token_len_per_gpu)"
                                                         : " responses (" + r.role + ".ppo_micro_batch_size_per_gpu)"))
                          .c_str());
  }
  if (plan.fits) return 0;
  const MemoryFix fix = suggest_memory_fix(config, plan_options);
  if (fix.overrides.empty()) {
    std::printf(
        "no change tried fits (ZeRO-3, offload, gradient checkpointing, smaller micro-batches): more ranks or "
        "a larger device are needed\n");
    return 0;
  }
  const std::string changes = join(fix.overrides, " ");
  std::printf("smallest change that fits: %s (re-planned: peak %s in %s)\n", changes.c_str(),
              size_text(fix.plan.peak_bytes).c_str(), fix.plan.peak_phase.c_str());
  return 0;
}

}  // namespace ppo
