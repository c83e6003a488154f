// See train/config_check.h.
#include "train/config_check.h"

#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>

#include "common/error.h"
#include "common/strings.h"
#include "model/lora.h"
#include "model/model_shape.h"
#include "model/transformer.h"
#include "parallel/context.h"
#include "records/run_dir.h"
#include "rl/algorithms.h"
#include "rl/distillation.h"
#include "rl/kl_controller.h"
#include "rollout/rollout.h"
#include "tasks/datasets.h"
#include "tasks/reward.h"
#include "tasks/task.h"
#include "train/experience.h"
#include "train/registry_keys.h"
#include "workers/optimizer.h"

namespace ppo {
namespace {

// Up to two values nearest to `value` (one below, one above) for which `ok` holds, searched in [1, limit] within
// kSearchWindow of `value` (and `limit` itself), so that a prime batch size of 2^31 - 1 is answered at once.
constexpr int64_t kSearchWindow = 1'000'000;
std::vector<int64_t> nearest_valid(int64_t value, int64_t limit, const std::function<bool(int64_t)>& ok) {
  std::vector<int64_t> out;
  for (int64_t v = std::min(value, limit), lowest = std::max<int64_t>(1, value - kSearchWindow); v >= lowest; --v)
    if (ok(v)) {
      out.push_back(v);
      break;
    }
  const int64_t highest = std::min(limit, std::max<int64_t>(value, 1) + kSearchWindow);
  bool above = false;
  for (int64_t v = std::max<int64_t>(value, 1); v <= highest && !above; ++v)
    if (ok(v) && (out.empty() || out.back() != v)) out.push_back(v), above = true;
  if (!above && limit > value && limit > highest && ok(limit)) out.push_back(limit);
  std::sort(out.begin(), out.end());
  return out;
}

std::string nearest_text(const std::vector<int64_t>& values) {
  if (values.empty()) return "no valid value nearby";
  return "nearest valid: " + (values.size() == 1 ? std::to_string(values[0])
                                                 : std::to_string(values[0]) + " or " + std::to_string(values[1]));
}

void check_positive(const std::string& key, int64_t value) {
  usage_check(value >= 1, key + "=" + std::to_string(value) + " must be at least 1");
}

// Responses per step: the batch's rows, each of up to 2^23 tokens (each factor is bounded by its schema row).
void check_responses_per_step(const Config& c) {
  constexpr int64_t k26 = int64_t{1} << 26;
  usage_check(c.data.train_batch_size * c.rollout.n <= k26,
              "data.train_batch_size=" + std::to_string(c.data.train_batch_size) + " x rollout.n=" +
                  std::to_string(c.rollout.n) + " = " + std::to_string(c.data.train_batch_size * c.rollout.n) +
                  " responses per step is out of range: at most " + std::to_string(k26));
}

// A mini-batch of `prompts` prompts over `world` ranks, split into micro-batches of `micro` responses per rank.
// Returns the number of micro-batches per rank, and in `micro` the micro-batch size used. A micro-batch larger than
// what a rank holds is a memory knob set too high, not a change of arithmetic: it is clamped to the rank's mini-batch
// and a note says so.
// `n_text` names n: "rollout.n=4", or ppo rm's "2 sequences per pair".
int64_t check_micro(const std::string& section, int64_t mini_prompts_per_rank, int64_t n, const std::string& n_text,
                    int64_t& micro, bool dynamic, int64_t world, std::vector<std::string>& notes) {
  const std::string mini_key = section + ".ppo_mini_batch_size";
  const std::string micro_key = section + ".ppo_micro_batch_size_per_gpu";
  int64_t responses = mini_prompts_per_rank * n;
  if (dynamic) return 0;  // micro-batches formed by the token budget at run time
  check_positive(micro_key, micro);
  auto divides = [&](int64_t v) { return responses % v == 0; };
  if (micro > responses) {
    notes.push_back(micro_key + "=" + std::to_string(micro) + " is more than a rank holds per mini-batch (" + mini_key +
                    " / " + std::to_string(world) + " ranks x " + n_text + " = " + std::to_string(responses) +
                    " responses); using " + std::to_string(responses) + ", which changes no numbers");
    micro = responses;
  }
  usage_check(divides(micro), micro_key + "=" + std::to_string(micro) + " does not divide the per-rank mini-batch (" +
                                  mini_key + " / " + std::to_string(world) + " ranks x " + n_text + " = " +
                                  std::to_string(responses) + " responses); " +
                                  nearest_text(nearest_valid(micro, responses, divides)));
  return responses / micro;
}

// The actor's mini- and micro-batches per rank in `d` (its prompts per rank set).
void check_actor_micro(const Config& c, int64_t world, int64_t n, const std::string& n_text, RunShape& d) {
  d.actor_mini_batches = c.data.train_batch_size / c.actor.ppo_mini_batch_size;
  d.actor_mini_prompts_per_rank = d.prompts_per_rank / d.actor_mini_batches;
  d.actor_micro_batch_size = c.actor.ppo_micro_batch_size_per_gpu;
  d.actor_micro_batches = check_micro("actor", d.actor_mini_prompts_per_rank, n, n_text, d.actor_micro_batch_size,
                                      c.actor.use_dynamic_bsz, world, d.notes);
}

// The global batch in equal chunks per rank, each mini-batch a divisor of it, dispatched in blocks of
// gcd(actor, critic) mini-batch prompts split equally over the ranks (so every mini-batch is the same set of prompts
// on any world size), and the micro-batches of each: the per-rank sizes in `d`.
// `use_actor` false: ppo rm, whose batches are the critic's alone (n = 2, the pair's sequences).
void check_batches(const Config& c, int64_t world, int64_t n, bool use_actor, bool use_critic, RunShape& d) {
  const int64_t B = c.data.train_batch_size;
  const bool pad = c.parallel.pad_to_world;
  if (!pad && B % world != 0) {
    std::vector<int64_t> worlds;
    for (int64_t w = 1; w <= world; ++w)
      if (B % w == 0) worlds.push_back(w);
    throw UsageError("data.train_batch_size=" + std::to_string(B) + " cannot be split into equal chunks over " +
                     std::to_string(world) + " ranks: use a multiple of " + std::to_string(world) + " (" +
                     std::to_string(world) + ", " + std::to_string(2 * world) + ", ...), run on " +
                     join(worlds, ", ", [](int64_t w) { return std::to_string(w); }) +
                     " ranks, or set parallel.pad_to_world=true");
  }
  auto check_mini = [&](const std::string& section, int64_t m) {
    auto ok = [&](int64_t v) { return B % v == 0 && (pad || v % world == 0); };
    usage_check(m <= B, section + ".ppo_mini_batch_size=" + std::to_string(m) +
                            " is larger than data.train_batch_size=" + std::to_string(B) + "; " +
                            nearest_text(nearest_valid(m, B, ok)));
    usage_check(B % m == 0, section + ".ppo_mini_batch_size=" + std::to_string(m) +
                                " does not divide data.train_batch_size=" + std::to_string(B) + "; " +
                                nearest_text(nearest_valid(m, B, ok)));
    usage_check(pad || m % world == 0,
                section + ".ppo_mini_batch_size=" + std::to_string(m) + " cannot be split into equal chunks over " +
                    std::to_string(world) + " ranks (data.train_batch_size=" + std::to_string(B) + "); " +
                    nearest_text(nearest_valid(m, B, ok)) + ", or set parallel.pad_to_world=true");
  };
  if (use_actor) check_mini("actor", c.actor.ppo_mini_batch_size);
  if (use_critic) check_mini("critic", c.critic.ppo_mini_batch_size);
  const int64_t block = !use_actor   ? c.critic.ppo_mini_batch_size
                        : use_critic ? std::gcd(c.actor.ppo_mini_batch_size, c.critic.ppo_mini_batch_size)
                                     : c.actor.ppo_mini_batch_size;
  const std::string n_text = use_actor ? "rollout.n=" + std::to_string(n) : "2 sequences per pair";
  usage_check(pad || block % world == 0,
              "actor.ppo_mini_batch_size=" + std::to_string(c.actor.ppo_mini_batch_size) +
                  " and critic.ppo_mini_batch_size=" + std::to_string(c.critic.ppo_mini_batch_size) +
                  " share blocks of " + std::to_string(block) + " prompts, which cannot be split over " +
                  std::to_string(world) + " ranks: make one a multiple of the other");
  const int64_t padded_block = pad ? (block + world - 1) / world * world : block;
  d.dispatch_block = block;
  d.padded_train_batch_size = B / block * padded_block;
  d.prompts_per_rank = d.padded_train_batch_size / world;
  d.responses_per_rank = d.prompts_per_rank * n;
  if (use_actor) check_actor_micro(c, world, n, n_text, d);
  if (!use_critic) return;
  d.critic_mini_batches = B / c.critic.ppo_mini_batch_size;
  d.critic_mini_prompts_per_rank = d.prompts_per_rank / d.critic_mini_batches;
  d.critic_micro_batch_size = c.critic.ppo_micro_batch_size_per_gpu;
  d.critic_micro_batches = check_micro("critic", d.critic_mini_prompts_per_rank, n, n_text, d.critic_micro_batch_size,
                                       c.critic.use_dynamic_bsz, world, d.notes);
}

// The token budgets and the KV-cache bound against the longest sequence, and the sampling settings: what every
// generation needs.
void check_lengths_and_sampling(const Config& c) {
  const int64_t longest = c.data.max_prompt_length + c.data.max_response_length;
  usage_check(longest <= c.model.max_position_embeddings,
              "data.max_prompt_length + data.max_response_length = " + std::to_string(longest) +
                  " exceeds model.max_position_embeddings=" + std::to_string(c.model.max_position_embeddings));
  const int64_t cache_width =
      decode_cache_width(c.data.max_prompt_length, c.data.max_response_length, c.rollout.multi_turn.enable);
  usage_check(c.rollout.max_kv_tokens == 0 || c.rollout.max_kv_tokens >= cache_width,
              "rollout.max_kv_tokens=" + std::to_string(c.rollout.max_kv_tokens) +
                  " cannot hold the KV cache of one sequence: data.max_prompt_length + data.max_response_length = " +
                  std::to_string(longest) + " tokens and room for the rows that join later, " +
                  std::to_string(cache_width) + " positions; use 0 (off) or at least " + std::to_string(cache_width));
  usage_check(c.data.min_difficulty <= c.data.max_difficulty,
              "data.min_difficulty=" + std::to_string(c.data.min_difficulty) +
                  " is above data.max_difficulty=" + std::to_string(c.data.max_difficulty));
}

// The token budgets of the update and log-prob micro-batches (use_dynamic_bsz) against the longest sequence.
void check_token_budgets(const Config& c, bool use_critic) {
  const int64_t longest = c.data.max_prompt_length + c.data.max_response_length;
  auto check_budget = [&](bool on, const std::string& on_key, const std::string& key, int64_t budget) {
    usage_check(!on || budget >= longest,
                key + "=" + std::to_string(budget) + " (with " + on_key +
                    "=true) cannot hold one sequence of data.max_prompt_length + data.max_response_length = " +
                    std::to_string(longest) + " tokens; use at least " + std::to_string(longest));
  };
  check_budget(c.actor.use_dynamic_bsz, "actor.use_dynamic_bsz", "actor.ppo_max_token_len_per_gpu",
               c.actor.ppo_max_token_len_per_gpu);
  check_budget(c.critic.use_dynamic_bsz && use_critic, "critic.use_dynamic_bsz", "critic.ppo_max_token_len_per_gpu",
               c.critic.ppo_max_token_len_per_gpu);
  check_budget(c.rollout.log_prob_use_dynamic_bsz, "rollout.log_prob_use_dynamic_bsz",
               "rollout.log_prob_max_token_len_per_gpu", c.rollout.log_prob_max_token_len_per_gpu);
}

// Every name against its registry (the estimator and policy-loss rows, KL estimators, loss aggregations, tasks,
// rewards, loggers, dtypes, ...).
void check_names(const Config& c) {
  check_registry_names(c);
  model_dtype(c.model.dtype);
  use_sdpa(c.model.attn_implementation);
  AutocastGuard::check_name(c.model.autocast_dtype);
  check_lora(c.actor.lora, c.model, "actor.lora");
  check_lora(c.critic.lora, c.model, "critic.lora");
  usage_check(c.model.lora_path.empty() || c.actor.lora.rank > 0,
              "model.lora_path=" + c.model.lora_path + " needs actor.lora.rank > 0 (the adapter's r, with its alpha " +
                  "and target_modules)");
}

// The settings of the algorithm beyond the batch: rollout correction, the reward's overlong buffer, timeouts,
// clip and optimizer settings.
void check_algorithm(const Config& c) {
  // rollout_is_threshold_lower: 0 truncates (TIS); (0, rollout_is_threshold] masks.
  const RolloutCorrectionConfig& rc = c.algorithm.rollout_correction;
  std::ostringstream lower;
  lower << "algorithm.rollout_correction.rollout_is_threshold_lower=" << rc.rollout_is_threshold_lower
        << " is out of range: it must lie in [0, " << rc.rollout_is_threshold << "]";
  usage_check(rc.rollout_is_threshold_lower <= rc.rollout_is_threshold, lower.str());
  const OverlongBufferConfig& ob = c.reward.overlong_buffer;
  if (ob.enable) {
    usage_check(ob.len >= 1 && ob.len <= c.data.max_response_length,
                "reward.overlong_buffer.len=" + std::to_string(ob.len) + " must be in [1, data.max_response_length=" +
                    std::to_string(c.data.max_response_length) + "] with reward.overlong_buffer.enable=true");
  }
  const MultiTurnConfig& mt = c.rollout.multi_turn;
  if (mt.enable) {
    usage_check(!mt.environment.command.empty(),
                "rollout.multi_turn.enable=true needs rollout.multi_turn.environment.command (the tool environment "
                "program, docs/multi-turn.md)");
    usage_check(mt.max_turns >= 1, "rollout.multi_turn.max_turns must be >= 1, got " + std::to_string(mt.max_turns));
    usage_check(mt.max_tool_response_length >= 1, "rollout.multi_turn.max_tool_response_length must be >= 1, got " +
                                                      std::to_string(mt.max_tool_response_length));
  }
  // clip_ratio_low and clip_ratio_high: < 0 means actor.clip_ratio; a value of their own is a clip range, > 0.
  for (const auto& [key, value] :
       {std::pair{"actor.clip_ratio_low", c.actor.clip_ratio_low}, {"actor.clip_ratio_high", c.actor.clip_ratio_high}})
    usage_check(value != 0, std::string(key) + "=0 is out of range: it must lie in (0, inf), or be < 0 (clip_ratio)");
  usage_check(c.actor.optim.betas.size() == 2, "actor.optim.betas must have two values, e.g. [0.9, 0.999]");
  usage_check(c.critic.optim.betas.size() == 2, "critic.optim.betas must have two values, e.g. [0.9, 0.999]");
}

// reward_model.*: a folder to read with enable, not under `ppo sft` (which has no reward), and its settings not set
// without it (they would change nothing). `ppo eval` and `ppo generate` score with the rule, as validation does.
void check_reward_model(const Config& c, RunMode mode) {
  const RewardModelConfig& rm = c.reward_model;
  if (!rm.enable) {
    usage_check(
        rm.weight == 1.0 && rm.rule_weight == 0.0 && !rm.normalize && rm.clip == 0.0,
        "reward_model.weight, rule_weight, normalize and clip apply with reward_model.enable=true; it is false");
    return;
  }
  usage_check(mode != RunMode::sft && mode != RunMode::reward_model,
              std::string("reward_model.enable=true: ppo ") + (mode == RunMode::sft ? "sft" : "rm") +
                  " has no reward; set reward_model.enable=false");
  usage_check(!rm.model.path.empty(),
              "reward_model.enable=true needs reward_model.model.path (a *ForSequenceClassification folder)");
  usage_check(rm.weight != 0.0,
              "reward_model.weight=0 with reward_model.enable=true: the reward model's score would "
              "not count; set reward_model.enable=false instead");
}

// distillation.*: its keys apply with distillation.enable, which needs a teacher and a subcommand that trains a policy
// on its own rollouts (generate and eval take a training config as it is, and ignore the section).
void check_distillation(const Config& c, RunMode mode) {
  const DistillationConfig& d = c.distillation;
  if (!d.enable) {
    usage_check(d.teacher.model.path.empty(), "distillation.teacher.model.path=" + d.teacher.model.path +
                                                  " is set but distillation.enable=false: set it to true, or drop "
                                                  "the path");
    return;
  }
  usage_check(mode != RunMode::sft && mode != RunMode::reward_model,
              std::string("distillation.enable=true: ppo ") + (mode == RunMode::sft ? "sft" : "rm") +
                  " trains on no rollouts of its own; set distillation.enable=false");
  usage_check(!d.teacher.model.path.empty(),
              "distillation.enable=true needs distillation.teacher.model.path (a Hugging Face folder or a ppo.cpp "
              "checkpoint)");
}

// data.curriculum's stages; returns the run's steps: trainer.total_training_steps, or steps_per_stage x the stages
// when that is 0 (and 0, by epochs, without a curriculum).
int64_t check_curriculum(const Config& c) {
  const CurriculumConfig& cur = c.data.curriculum;
  if (cur.train_files.empty() && cur.difficulties.empty()) return c.trainer.total_training_steps;
  usage_check(cur.train_files.empty() || cur.difficulties.empty(),
              "data.curriculum: set train_files (one dataset per stage) or difficulties (stages of one dataset), "
              "not both");
  usage_check(cur.train_files.empty() || c.data.train_files.empty(),
              "data.curriculum.train_files replaces data.train_files: leave data.train_files empty");
  check_positive("data.curriculum.steps_per_stage", cur.steps_per_stage);
  const int64_t stages = static_cast<int64_t>(std::max(cur.train_files.size(), cur.difficulties.size()));
  // steps_per_stage < 2^31 and a stage list far shorter than 2^32: the product cannot overflow.
  const int64_t curriculum_steps = stages * cur.steps_per_stage;
  usage_check(curriculum_steps <= std::numeric_limits<int32_t>::max(),
              "data.curriculum.steps_per_stage=" + std::to_string(cur.steps_per_stage) + " x " +
                  std::to_string(stages) + " stages = " + std::to_string(curriculum_steps) +
                  " steps is out of range: at most " + std::to_string(std::numeric_limits<int32_t>::max()));
  const int64_t total = c.trainer.total_training_steps > 0 ? c.trainer.total_training_steps : curriculum_steps;
  usage_check(total > (stages - 1) * cur.steps_per_stage,
              "trainer.total_training_steps=" + std::to_string(total) + " ends before the last of data.curriculum's " +
                  std::to_string(stages) + " stages begins (at step " +
                  std::to_string((stages - 1) * cur.steps_per_stage + 1) +
                  ", data.curriculum.steps_per_stage=" + std::to_string(cur.steps_per_stage) + ")");
  return total;
}

// ppo rm's micro-batches hold whole pairs, both sequences scored in one forward: a count, and an even one.
void check_rm_batches(const Config& c, const RunShape& d) {
  usage_check(!c.critic.use_dynamic_bsz,
              "critic.use_dynamic_bsz=true: ppo rm forms its micro-batches by a count of sequences, so that a "
              "pair's two stay together; set it to false and use critic.ppo_micro_batch_size_per_gpu");
  usage_check(c.data.curriculum.train_files.empty() && c.data.curriculum.difficulties.empty(),
              "data.curriculum: ppo rm trains on data.train_files' preference pairs, which have no stages; remove "
              "data.curriculum");
  usage_check(d.critic_micro_batch_size % 2 == 0,
              "critic.ppo_micro_batch_size_per_gpu=" + std::to_string(d.critic_micro_batch_size) +
                  " splits a pair: ppo rm scores a pair's chosen and rejected sequences in one micro-batch; use an "
                  "even number (2 per pair)");
}

// What training on `n` responses per prompt needs beyond generation: the batch relations for the world size, the
// update's token budgets, the curriculum, and (PPO) the estimator's group size and dynamic sampling.
void check_training(const Config& c, int64_t world, RunMode mode, RunShape& d) {
  const AdvEstimatorSpec& estimator = adv_estimator(c.algorithm.adv_estimator);
  const bool ppo = mode == RunMode::train, rm = mode == RunMode::reward_model;
  const bool use_critic = (ppo && estimator.needs_critic) || rm;
  // SFT trains on the one reference answer of each prompt, ppo rm on the two responses of each pair.
  const int64_t n = ppo ? c.rollout.n : rm ? 2 : 1;
  check_batches(c, world, n, /*use_actor=*/!rm, use_critic, d);
  check_token_budgets(c, use_critic);
  if (rm) check_rm_batches(c, d);
  d.total_training_steps = check_curriculum(c);
  if (!ppo) return;
  usage_check(n >= estimator.min_group_size, "algorithm.adv_estimator=" + c.algorithm.adv_estimator +
                                                 " needs rollout.n >= " + std::to_string(estimator.min_group_size) +
                                                 " (got " + std::to_string(n) +
                                                 "): it compares the responses of a prompt with each other");
  const FilterGroupsConfig& fg = c.algorithm.filter_groups;
  if (fg.enable) {
    usage_check(n >= 2, "algorithm.filter_groups.enable=true needs rollout.n >= 2 (got " + std::to_string(n) +
                            "): it keeps the prompts whose responses differ");
  }
}

}  // namespace

void check_roles(const Config& c, int64_t world, RunMode mode) {
  const int64_t k = c.parallel.rollout_ranks;
  if (mode != RunMode::train) return;
  if (c.actor.router_replay != "disabled") {
    usage_check(c.model.moe.num_experts > 0, "actor.router_replay=" + c.actor.router_replay +
                                                 " replays a mixture-of-experts policy's routing; this model has no "
                                                 "experts (model.moe.num_experts=0)");
  }
  usage_check(k == 0 || k < world,
              "parallel.rollout_ranks=" + std::to_string(k) + " leaves no trainer rank of the " +
                  std::to_string(world) + " rank(s) of this job: run at least " + std::to_string(k + 1) +
                  " ranks (mpirun -np " + std::to_string(k + 1) + ")" +
                  (world >= 2 ? ", use parallel.rollout_ranks=1.." + std::to_string(world - 1) : std::string()) +
                  ", or 0 (every rank generates and trains)");
  usage_check(k > 0 || c.async.max_staleness == 0,
              "async.max_staleness=" + std::to_string(c.async.max_staleness) +
                  " needs parallel.rollout_ranks >= 1: colocated ranks generate and train in turn, on the weights "
                  "of the last step");
}

RunShape check_config(const Config& c, int64_t world, RunMode mode) {
  check_roles(c, world, mode);
  // With rollout ranks, the trainers are the world of the update's batch sizes, and the rollout ranks that of
  // validation: each role's checks name it.
  const int64_t rollout = mode == RunMode::train ? c.parallel.rollout_ranks : 0, trainers = world - rollout;
  const int64_t generators = rollout > 0 ? rollout : world;
  const std::string role = rollout > 0 ? " rollout" : "";
  RunShape d;
  d.world_size = trainers;
  d.rollout_ranks = rollout;
  check_responses_per_step(c);
  check_names(c);
  check_algorithm(c);
  check_reward_model(c, mode);
  check_distillation(c, mode);
  usage_check(mode == RunMode::reward_model || c.critic.center_rewards_coefficient == 0,
              "critic.center_rewards_coefficient applies to ppo rm's loss; it is set for another subcommand");
  check_lengths_and_sampling(c);
  // Validation batches: always padded internally at the end of the set, so only the per-rank split matters.
  usage_check(c.parallel.pad_to_world || c.data.val_batch_size % generators == 0,
              "data.val_batch_size=" + std::to_string(c.data.val_batch_size) +
                  " cannot be split into equal chunks over " + std::to_string(generators) + role + " ranks; " +
                  nearest_text(nearest_valid(c.data.val_batch_size, 4 * c.data.val_batch_size + generators,
                                             [&](int64_t v) { return v % generators == 0; })) +
                  ", or set parallel.pad_to_world=true");
  d.val_prompts_per_rank = (c.data.val_batch_size + generators - 1) / generators;
  if (mode == RunMode::generation) return d;
  if (rollout == 0) {
    check_training(c, world, mode, d);
    return d;
  }
  try {
    check_training(c, trainers, mode, d);
  } catch (const UsageError& e) {
    throw UsageError(std::string(e.what()) + " (the ranks here are the trainer ranks: the job's " +
                     std::to_string(world) + " less parallel.rollout_ranks=" + std::to_string(rollout) + ")");
  }
  return d;
}

std::string describe_batch(const Config& c, const RunShape& d) {
  const int64_t n = c.rollout.n;
  std::ostringstream out;
  out << "batch: " << c.data.train_batch_size << " prompts x " << n << " responses = " << c.data.train_batch_size * n
      << " responses per step over " << d.world_size << (d.rollout_ranks > 0 ? " trainer" : "") << " rank(s)";
  if (d.rollout_ranks > 0)
    out << ", generated by " << d.rollout_ranks
        << " rollout rank(s) (parallel.rollout_ranks; async.max_staleness=" << c.async.max_staleness << ")";
  if (d.padded_train_batch_size != c.data.train_batch_size)
    out << " (padded to " << d.padded_train_batch_size << " prompts with masked copies)";
  out << "\n       per rank: " << d.prompts_per_rank << " prompts, " << d.responses_per_rank << " responses\n";
  out << "       actor: " << d.actor_mini_batches << " mini-batch(es) of " << c.actor.ppo_mini_batch_size
      << " prompts x " << c.actor.ppo_epochs << " epoch(s); per rank " << d.actor_mini_prompts_per_rank * n
      << " responses per mini-batch";
  if (c.actor.use_dynamic_bsz)
    out << " in micro-batches of <= " << c.actor.ppo_max_token_len_per_gpu << " tokens";
  else
    out << " = " << d.actor_micro_batches << " micro-batch(es) of " << d.actor_micro_batch_size
        << " (gradient accumulation steps)";
  if (d.critic_mini_batches > 0) {
    out << "\n       critic: " << d.critic_mini_batches << " mini-batch(es) of " << c.critic.ppo_mini_batch_size
        << " prompts; per rank ";
    if (c.critic.use_dynamic_bsz)
      out << "micro-batches of <= " << c.critic.ppo_max_token_len_per_gpu << " tokens";
    else
      out << d.critic_micro_batches << " micro-batch(es) of " << d.critic_micro_batch_size;
  }
  // Generation waves and the KV cache of one wave at the widest prompt.
  const int64_t cache_width =
      decode_cache_width(c.data.max_prompt_length, c.data.max_response_length, c.rollout.multi_turn.enable);
  const int64_t wave = generation_wave_size(c, c.data.max_prompt_length);
  auto kv_mib = [&](int64_t sequences) { return kv_cache_bytes(c.model, cache_width, sequences) / (1 << 20); };
  out << "\n       rollout: waves of <= " << wave << " sequences; KV cache <= " << kv_mib(wave) << " MiB per wave";
  const int64_t val_wave = validation_wave_size(c, c.data.max_prompt_length, d.val_prompts_per_rank);
  out << "\n       validation: " << val_wave << " sequences per rank decoded together (greedy; x k for pass@k); KV "
      << "cache <= " << kv_mib(val_wave) << " MiB";
  const int64_t max_tokens = c.data.train_batch_size * n * (c.data.max_prompt_length + c.data.max_response_length);
  out << "\n       tokens per step: at most " << max_tokens << " (prompt + response), " << max_tokens / d.world_size
      << " per rank\n";
  for (const std::string& note : d.notes) out << "note: " << note << "\n";
  return out.str();
}

}  // namespace ppo
