// The configuration: one struct per section, each key written once, as a schema row of its section's X-macro:
//   K(type, name, default, range, resume, help)
// The row gives the struct member and its default, the `fields(f)` row that the strict loader, the range check,
// the YAML printer (`ppo config --comments`), `--help` and the resume check read (common/config_schema.h). Leaf names
// follow veRL where the concept is the same. Relations between keys are check_config's (train/config_check.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config_schema.h"
#include "common/frozen_models_config.h"
#include "common/model_config.h"
#include "common/worker_config.h"

namespace ppo {

#define PPO_CURRICULUM_KEYS(K)                                                                                      \
  K(std::vector<std::string>, train_files, {}, any(), fixed,                                                        \
    "curriculum learning (Logic-RL, Xie et al. 2025, arXiv:2502.14768: Knights-and-Knaves of 3, then 4, ... 7 "     \
    "people): the training prompts of each stage, one file (JSONL or Parquet) per stage in order (instead of "      \
    "data.train_files)")                                                                                            \
  K(std::vector<int64_t>, difficulties, {}, any(), fixed,                                                           \
    "or a difficulty schedule over the one training set (data.train_files, or the generated prompts): stage k "     \
    "takes the prompts of difficulty difficulties[k] (people for kk, digits for toy tasks)")                        \
  K(int64_t, steps_per_stage, 0, at_least(0), fixed,                                                                \
    "steps of each stage but the last, which runs to trainer.total_training_steps (0 there: steps_per_stage x the " \
    "stages). A stage samples its own prompts, reshuffled every pass as data.shuffle says; resume is exact")

struct CurriculumConfig {
  PPO_CURRICULUM_KEYS(PPO_CONFIG_MEMBER)
  template <class F>
  void fields(F&& f) {
    PPO_CURRICULUM_KEYS(PPO_CONFIG_FIELD)
  }
};

#define PPO_DATA_KEYS(K)                                                                                              \
  K(std::string, task, "reverse", registry(), fixed, "built-in task:")                                                \
  K(std::vector<std::string>, train_files, {}, any(), fixed,                                                          \
    "training prompts: a file or a list of files, JSONL or Parquet (.parquet) mixed, read in order: the task's "      \
    "records, or veRL's (prompt, data_source, reward_model.ground_truth, extra_info); empty = generate from the "     \
    "task")                                                                                                           \
  K(std::vector<std::string>, val_files, {}, any(), free,                                                             \
    "validation prompts (as train_files); empty = generate from the task")                                            \
  K(std::string, prompt_key, "prompt", any(), fixed,                                                                  \
    "veRL records: the field holding the prompt, a string or a list of chat messages")                                \
  K(std::string, chosen_key, "chosen", any(), fixed,                                                                  \
    "ppo rm's preference pairs (TRL's and OpenRLHF's layouts): the preferred response, a string or chat messages "    \
    "ending in one assistant message")                                                                                \
  K(std::string, rejected_key, "rejected", any(), fixed, "ppo rm's preference pairs: the other response (as chosen)") \
  K(std::string, margin_key, "margin", any(), fixed,                                                                  \
    "ppo rm's preference pairs: a number m where a pair has one, giving the loss -log sigmoid(r_chosen - "            \
    "r_rejected - m) (TRL's margin column)")                                                                          \
  K(int64_t, train_size, 2048, between(0, k26), fixed, "prompts generated for training when train_files is empty")    \
  K(int64_t, val_size, 64, between(0, k26), free, "prompts generated for validation when val_files is empty")         \
  K(int64_t, min_difficulty, 2, any(), fixed, "smallest task difficulty (digits for toy tasks, people for kk)")       \
  K(int64_t, max_difficulty, 4, any(), fixed, "largest task difficulty")                                              \
  K(int64_t, max_prompt_length, 64, between(1, k22), fixed,                                                           \
    "longest prompt in tokens; a longer one is handled by truncation, or skipped with filter_overlong_prompts")       \
  K(std::string, truncation, "error", names("error", "left", "right", "middle"), fixed,                               \
    "a prompt longer than max_prompt_length: error (names the file and line) | left (keep its last tokens) | right "  \
    "(keep its first tokens) | middle (keep both ends)")                                                              \
  K(bool, filter_overlong_prompts, false, any(), fixed,                                                               \
    "skip prompts longer than max_prompt_length when the data is loaded (the count is printed)")                      \
  K(bool, apply_chat_template, false, any(), fixed,                                                                   \
    "render each prompt as a chat (system/user messages, then the assistant turn) with the tokenizer's chat "         \
    "template (ChatML, Qwen3's or Llama 3.1-3.3's), as instruct models expect; false = the task's plain prompt "      \
    "text (veRL records whose prompt is a list of messages are always rendered)")                                     \
  K(std::string, chat_template, "", any(), fixed,                                                                     \
    "template of chat prompts: empty = the tokenizer's | chatml | plain (\"User: ...\\nAssistant: \") | a path to "   \
    "a .jinja file of a form the tokenizer's may have")                                                               \
  K(bool, enable_thinking, true, any(), fixed,                                                                        \
    "Qwen3's chat template: thinking on (the template's default) or off (the generation prompt ends in an empty "     \
    "<think></think> block, as apply_chat_template's enable_thinking=False, veRL's "                                  \
    "data.apply_chat_template_kwargs.enable_thinking); false with a template that has no such switch is an error")    \
  K(int64_t, max_response_length, 16, between(1, k22), fixed, "most tokens generated per response")                   \
  K(int64_t, train_batch_size, 16, between(1, k24), fixed, "prompts per PPO step, over all ranks")                    \
  K(int64_t, val_batch_size, 64, between(1, k24), free,                                                               \
    "prompts per validation generation batch, over all ranks; a batch's sequences decode together (bounded by "       \
    "rollout.max_num_seqs and rollout.max_kv_tokens), so the KV cache of a batch must fit")                           \
  K(bool, shuffle, true, any(), fixed, "reshuffle the training prompts every epoch")                                  \
  K(int64_t, seed, 1, any(), fixed, "seed of data generation and of the prompt sampler")

struct DataConfig {
  PPO_DATA_KEYS(PPO_CONFIG_MEMBER)
  CurriculumConfig curriculum;
  template <class F>
  void fields(F&& f) {
    PPO_DATA_KEYS(PPO_CONFIG_FIELD)
    f("curriculum", curriculum);
  }
};

#define PPO_POLICY_LOSS_KEYS(K) \
  K(std::string, loss_mode, "vanilla", registry(), fixed, "the policy loss, each taking actor.clip_ratio_low/high:")

struct PolicyLossConfig {
  PPO_POLICY_LOSS_KEYS(PPO_CONFIG_MEMBER)
  template <class F>
  void fields(F&& f) {
    PPO_POLICY_LOSS_KEYS(PPO_CONFIG_FIELD)
  }
};

// The keys the actor and the critic share, under veRL's names in both sections: mini- and micro-batches, the token
// budget, packing, passes, the gradient clip and the loss aggregation. `WHO` names the model in their
// help, `FORWARDS` the forwards that packing serves.
#define PPO_TRAINED_MODEL_KEYS(K, WHO, FORWARDS)                                                                  \
  K(int64_t, ppo_mini_batch_size, 8, between(1, k24), fixed,                                                      \
    "prompts per " WHO " mini-batch over all ranks (x rollout.n responses; ppo rm's critic: pairs)")              \
  K(int64_t, ppo_micro_batch_size_per_gpu, 8, between(0, k24), free,                                              \
    "responses per " WHO " micro-batch on each rank (ppo rm's critic: 2 per pair)")                               \
  K(bool, use_dynamic_bsz, false, any(), free, "form " WHO " micro-batches by a token budget instead of a count") \
  K(int64_t, ppo_max_token_len_per_gpu, 4096, at_least(1), free,                                                  \
    "token budget per " WHO " micro-batch when use_dynamic_bsz")                                                  \
  K(bool, use_remove_padding, true, any(), fixed,                                                                 \
    WHO " forwards (" FORWARDS                                                                                    \
        ") run on a micro-batch's real tokens only, laid end to end in one sequence with "                        \
        "attention kept within each; false: padded [rows, prompt + response] tensors")                            \
  K(int64_t, ppo_epochs, 1, between(1, k16), fixed, WHO " passes over the step's batch")                          \
  K(double, grad_clip, 1.0, above(0), fixed, "clip " WHO " gradients to this global norm")                        \
  K(std::string, loss_agg_mode, "token-mean", registry(), fixed,                                                  \
    "aggregation of the " WHO " loss over tokens and rows:")

#define PPO_ACTOR_KEYS(K)                                                                                              \
  PPO_TRAINED_MODEL_KEYS(K, "policy", "old and reference log-probs, the update")                                       \
  K(bool, shuffle, false, any(), fixed, "shuffle samples between PPO epochs")                                          \
  K(double, clip_ratio, 0.2, above(0), fixed, "PPO clip range, default of clip_ratio_low and clip_ratio_high")         \
  K(double, clip_ratio_low, -1, any(), fixed, "lower clip range (ratio >= 1 - low); < 0 means clip_ratio")             \
  K(double, clip_ratio_high, -1, any(), fixed, "upper clip range (ratio <= 1 + high); < 0 means clip_ratio")           \
  K(double, clip_ratio_c, 3.0, above(1), fixed, "dual-clip bound for negative advantages, > 1")                        \
  K(double, entropy_coeff, 0.0, any(), fixed, "weight of the entropy bonus")                                           \
  K(bool, use_kl_loss, false, any(), fixed, "add KL to the reference policy as a loss term")                           \
  K(double, kl_loss_coef, 0.001, at_least(0), fixed, "weight of the KL loss")                                          \
  K(std::string, kl_loss_type, "low_var_kl", registry(), fixed, "KL estimator of the loss:")                           \
  K(std::string, init_checkpoint, "", any(), free, "start the policy from this checkpoint folder (e.g. an SFT run's)") \
  K(std::string, router_replay, "disabled", names("disabled", "R3"), fixed,                                            \
    "an MoE policy's routing replay (veRL's router_replay.mode): disabled | R3 (the rollout records each token's "     \
    "experts; the old log-prob, reference and update forwards route through them)")

struct ActorConfig {
  PPO_ACTOR_KEYS(PPO_CONFIG_MEMBER)
  PolicyLossConfig policy_loss;
  OptimConfig optim;
  OffloadConfig offload;
  LoraConfig lora;
  template <class F>
  void fields(F&& f) {
    PPO_ACTOR_KEYS(PPO_CONFIG_FIELD)
    f("policy_loss", policy_loss);
    f("optim", optim);
    f("offload", offload);
    f("lora", lora);
  }
};

#define PPO_ENVIRONMENT_KEYS(K)                                                                                      \
  K(std::string, command, "", any(), fixed,                                                                          \
    "the tool environment, started once per rank (sh -c): one JSON line per tool call on stdin, one JSON line with " \
    "\"output\" (and optionally \"done\", \"reward\") back (docs/multi-turn.md)")                                    \
  K(double, timeout_s, 60.0, above(0), free, "longest wait in seconds for the environment's next answer line")

struct EnvironmentConfig {
  PPO_ENVIRONMENT_KEYS(PPO_CONFIG_MEMBER)
  template <class F>
  void fields(F&& f) {
    PPO_ENVIRONMENT_KEYS(PPO_CONFIG_FIELD)
  }
};

#define PPO_MULTI_TURN_KEYS(K)                                                                                       \
  K(bool, enable, false, any(), fixed,                                                                               \
    "multi-turn rollouts: an assistant turn that ends in a tool call gets the environment's answer appended in the " \
    "chat template's tool role, and generation goes on in the same trajectory; tool and template tokens are masked " \
    "out of the losses (docs/multi-turn.md)")                                                                        \
  K(int64_t, max_turns, 4, any(), fixed,                                                                             \
    "assistant turns per trajectory (>= 1); a call in the last turn is not answered")                                \
  K(int64_t, max_tool_response_length, 256, any(), fixed,                                                            \
    "tokens of one tool output (>= 1); a longer output keeps its first tokens")                                      \
  K(std::string, call_start, "<tool_call>", any(), fixed,                                                            \
    "a tool call is the text of an assistant turn from this string to `stop`; empty: from the turn's start")         \
  K(std::string, stop, "</tool_call>", any(), fixed,                                                                 \
    "the text that ends an assistant turn with a tool call (besides EOS), as Qwen2.5 and Hermes write tool calls; "  \
    "empty: a turn ends at EOS only, and its call at the turn's end (both empty: every turn goes to the "            \
    "environment, which says when it is done)")

struct MultiTurnConfig {
  PPO_MULTI_TURN_KEYS(PPO_CONFIG_MEMBER)
  EnvironmentConfig environment;
  template <class F>
  void fields(F&& f) {
    PPO_MULTI_TURN_KEYS(PPO_CONFIG_FIELD)
    f("environment", environment);
  }
};

#define PPO_ROLLOUT_KEYS(K)                                                                                          \
  K(int64_t, n, 4, between(1, k16), fixed, "responses sampled per prompt")                                           \
  K(double, temperature, 1.0, at_least(0), fixed, "sampling temperature; 0 = greedy")                                \
  K(int64_t, top_k, -1, off_or(-1, at_least(1)), fixed, "sample among the k most likely tokens; -1 = off")           \
  K(double, top_p, 1.0, interval(0, true, 1, false), fixed, "nucleus sampling mass; 1 = off")                        \
  K(int64_t, micro_batch_size, 64, between(1, k24), free,                                                            \
    "sequences decoded together on each rank; a finished sequence's slot takes the next waiting prompt (validation " \
    "decodes a whole data.val_batch_size batch together and prefills this many prompts at a time)")                  \
  K(int64_t, max_num_seqs, 0, between(0, k24), free,                                                                 \
    "KV-cache bound in sequences per generation wave; 0 = micro_batch_size (validation: the whole batch)")           \
  K(int64_t, max_kv_tokens, 0, at_least(0), free,                                                                    \
    "KV-cache bound in token positions per generation wave (sequences x cache width; the width is prompt width + "   \
    "max_response_length + half of that for the rows that join as others finish); 0 = off")                          \
  K(int64_t, check_interval, 8, at_least(1), free,                                                                   \
    "decode steps between the host's reads of which rows finished (the decode loop's only device-to-host copy; "     \
    "finished rows' slots then take waiting prompts); a row reaching max_response_length is noticed at once")        \
  K(bool, cuda_graphs, true, any(), free,                                                                            \
    "on CUDA, replay the decode step as CUDA graphs, one per batch-size bucket (1, 2, 4, 8, then multiples of 16), " \
    "captured the second time a bucket runs; no effect on the CPU")                                                  \
  K(int64_t, log_prob_micro_batch_size_per_gpu, 16, between(1, k24), free,                                           \
    "responses per forward pass when computing log-probs")                                                           \
  K(bool, log_prob_use_dynamic_bsz, false, any(), free, "log-prob micro-batches by token budget")                    \
  K(int64_t, log_prob_max_token_len_per_gpu, 4096, at_least(1), free, "token budget of a log-prob micro-batch")      \
  K(double, val_temperature, 0.0, at_least(0), free, "sampling temperature for validation; 0 = greedy")

struct RolloutConfig {
  PPO_ROLLOUT_KEYS(PPO_CONFIG_MEMBER)
  MultiTurnConfig multi_turn;
  template <class F>
  void fields(F&& f) {
    PPO_ROLLOUT_KEYS(PPO_CONFIG_FIELD)
    f("multi_turn", multi_turn);
  }
};

#define PPO_REF_KEYS(K)                                                    \
  K(int64_t, log_prob_micro_batch_size_per_gpu, 16, between(1, k24), free, \
    "responses per forward pass of the reference policy")

struct RefConfig {
  PPO_REF_KEYS(PPO_CONFIG_MEMBER)
  OffloadConfig offload;
  template <class F>
  void fields(F&& f) {
    PPO_REF_KEYS(PPO_CONFIG_FIELD)
    f("offload", offload);
  }
};

#define PPO_CRITIC_KEYS(K)                                                                                      \
  PPO_TRAINED_MODEL_KEYS(K, "critic", "values, the update")                                                     \
  K(double, cliprange_value, 0.5, above(0), fixed, "value clipping range around the old values")                \
  K(std::string, init_checkpoint, "", any(), free,                                                              \
    "start the critic from this checkpoint folder: a PPO run's or a ppo rm run's (critic.pt), or an SFT run's " \
    "(actor.pt: its backbone, the value head seeded)")                                                          \
  K(double, center_rewards_coefficient, 0.0, at_least(0), fixed,                                                \
    "ppo rm: adds this x mean((r_chosen + r_rejected)^2) to the loss, keeping scores centred on 0 (TRL's "      \
    "center_rewards_coefficient, Eisenstein et al. 2023); 0 = off")

#define PPO_CRITIC_MODEL_KEYS(K)                                                                                 \
  K(std::string, path, "", any(), fixed,                                                                         \
    "the critic's initial weights from this Hugging Face folder instead of model.path: a sequence classifier "   \
    "(a reward model; its score head becomes the value head, as OpenRLHF starts its critic) or a causal LM, of " \
    "model.*'s shape")

struct CriticModelConfig {
  PPO_CRITIC_MODEL_KEYS(PPO_CONFIG_MEMBER)
  template <class F>
  void fields(F&& f) {
    PPO_CRITIC_MODEL_KEYS(PPO_CONFIG_FIELD)
  }
};

struct CriticConfig {
  PPO_CRITIC_KEYS(PPO_CONFIG_MEMBER)
  CriticModelConfig model;
  OptimConfig optim;
  OffloadConfig offload;
  LoraConfig lora;
  template <class F>
  void fields(F&& f) {
    PPO_CRITIC_KEYS(PPO_CONFIG_FIELD)
    f("model", model);
    f("optim", optim);
    f("offload", offload);
    f("lora", lora);
  }
};

#define PPO_KL_CTRL_KEYS(K)                                                                             \
  K(std::string, type, "fixed", registry(), fixed, "KL-in-reward controller:")                          \
  K(double, kl_coef, 0.001, at_least(0), fixed, "KL penalty coefficient (initial value when adaptive)") \
  K(double, target_kl, 0.1, above(0), fixed, "adaptive controller's target KL")                         \
  K(int64_t, horizon, 10000, at_least(1), fixed, "adaptive controller's horizon")

struct KlCtrlConfig {
  PPO_KL_CTRL_KEYS(PPO_CONFIG_MEMBER)
  template <class F>
  void fields(F&& f) {
    PPO_KL_CTRL_KEYS(PPO_CONFIG_FIELD)
  }
};

#define PPO_ROLLOUT_CORRECTION_KEYS(K)                                                                             \
  K(std::string, rollout_is, "off", registry(), fixed,                                                             \
    "importance weights pi_train / pi_rollout on the policy loss, from the rollout's own log-probs and the "       \
    "training forward's (veRL algorithm.rollout_correction.rollout_is; OpenRLHF is_correction_type): off | token " \
    "(one weight per token) | sequence (the product over the response). The gap is logged every step either way")  \
  K(double, rollout_is_threshold, 2.0, above(0), fixed,                                                            \
    "upper bound C of the weights: truncated IS (TIS, Yao et al. 2025) caps them at C")                            \
  K(double, rollout_is_threshold_lower, 0, at_least(0), fixed,                                                     \
    "0: truncate at rollout_is_threshold (TIS); > 0: masking instead (IcePop / MIS, veRL's \"lower_upper\" "       \
    "threshold): weights outside [lower, rollout_is_threshold] become 0, the others stay as they are")

struct RolloutCorrectionConfig {
  PPO_ROLLOUT_CORRECTION_KEYS(PPO_CONFIG_MEMBER)
  template <class F>
  void fields(F&& f) {
    PPO_ROLLOUT_CORRECTION_KEYS(PPO_CONFIG_FIELD)
  }
};

#define PPO_FILTER_GROUPS_KEYS(K)                                                                                  \
  K(bool, enable, false, any(), fixed,                                                                             \
    "DAPO dynamic sampling (Yu et al. 2025, arXiv:2503.14476; veRL algorithm.filter_groups): prompt groups whose " \
    "responses all have the same metric are dropped, and further batches of data.train_batch_size prompts are "    \
    "generated until data.train_batch_size groups remain (the surplus is dropped). Needs rollout.n >= 2")          \
  K(std::string, metric, "acc", registry(), fixed,                                                                 \
    "what must differ within a group: acc (correct or not) | score (the reward: the rule's, with the reward "      \
    "model's under reward_model.enable) | seq_reward (the score with reward.overlong_buffer's punishment)")        \
  K(int64_t, max_num_gen_batches, 10, at_least(1), fixed,                                                          \
    "generation batches a step may take at most; fewer groups with signal than that stops the run with an error "  \
    "(veRL's 0, no limit, is not offered: a policy that solves everything would never finish a step)")

struct FilterGroupsConfig {
  PPO_FILTER_GROUPS_KEYS(PPO_CONFIG_MEMBER)
  template <class F>
  void fields(F&& f) {
    PPO_FILTER_GROUPS_KEYS(PPO_CONFIG_FIELD)
  }
};

#define PPO_ALGORITHM_KEYS(K)                                                                                      \
  K(std::string, adv_estimator, "gae", registry(), fixed, "the advantage estimator:")                              \
  K(double, gamma, 1.0, between(0, 1), fixed, "discount factor")                                                   \
  K(double, lam, 1.0, between(0, 1), fixed, "GAE lambda")                                                          \
  K(bool, norm_adv_by_std_in_grpo, true, any(), fixed, "grpo and grpo_passk divide advantages by the group's std") \
  K(bool, mask_truncated_completions, false, any(), fixed,                                                         \
    "responses cut off at data.max_response_length (no EOS) leave every loss; their rewards still count in their " \
    "group (TRL mask_truncated_completions; DAPO, Yu et al. 2025, masks them too)")                                \
  K(bool, use_kl_in_reward, false, any(), fixed, "subtract a per-token KL penalty from the reward")                \
  K(std::string, kl_penalty, "kl", registry(), fixed, "KL estimator used in the reward:")

struct AlgorithmConfig {
  PPO_ALGORITHM_KEYS(PPO_CONFIG_MEMBER)
  KlCtrlConfig kl_ctrl;
  RolloutCorrectionConfig rollout_correction;
  FilterGroupsConfig filter_groups;
  template <class F>
  void fields(F&& f) {
    PPO_ALGORITHM_KEYS(PPO_CONFIG_FIELD)
    f("kl_ctrl", kl_ctrl);
    f("rollout_correction", rollout_correction);
    f("filter_groups", filter_groups);
  }
};

#define PPO_TRAINER_KEYS(K)                                                                                            \
  K(int64_t, total_epochs, 1, at_least(0), free, "passes over the training prompts (when total_training_steps is 0)")  \
  K(int64_t, total_training_steps, 0, at_least(0), free, "PPO steps to run; > 0 overrides total_epochs")               \
  K(std::string, output_dir, "runs/default", any(), free, "run directory: config.yaml, metrics.jsonl, checkpoints/")   \
  K(int64_t, save_freq, 0, at_least(0), free, "write a checkpoint every N steps; 0 = only after the last step")        \
  K(int64_t, test_freq, 0, at_least(0), free, "validate every N steps; 0 = not during training")                       \
  K(bool, val_before_train, false, any(), free, "validate before the first step")                                      \
  K(std::string, resume_mode, "auto", any(), free,                                                                     \
    "auto (latest in output_dir) | disable | path of a checkpoint folder")                                             \
  K(int64_t, max_ckpt_to_keep, 2, at_least(0), free, "keep at most this many checkpoints; 0 = all")                    \
  K(int64_t, critic_warmup, 0, at_least(0), fixed, "steps that update only the critic")                                \
  K(bool, balance_batch, false, any(), fixed, "reorder the batch so every rank gets a similar token count")            \
  K(int64_t, num_threads, 0, at_least(0), free,                                                                        \
    "intra-op CPU threads per rank; 0 = OMP_NUM_THREADS when set, else the cores this rank may use (its CPU "          \
    "affinity), at most cores / local ranks; use 1 on a machine other jobs share")                                     \
  K(int64_t, seed, 1, any(), fixed, "seed of sampling and mini-batch shuffles")                                        \
  K(int64_t, log_freq, 1, at_least(0), free, "print a progress line every N steps")                                    \
  K(bool, write_checkpoints, true, any(), free, "false = never write checkpoints")                                     \
  K(int64_t, max_skipped_steps, 5, at_least(0), free,                                                                  \
    "stop with an error after this many steps in a row in which an optimizer step was skipped (a non-finite "          \
    "gradient norm); each such step prints a warning; 0 = never stop")                                                 \
  K(bool, resume_allow_config_change, false, any(), free,                                                              \
    "resume from a checkpoint whose run had other values of keys that change the numbers (batch sizes, rollout.n, "    \
    "seeds, the model's shape, the algorithm, the data, the reward); the keys are printed. Without it such a "         \
    "resume is an error naming them")                                                                                  \
  K(bool, accept_checkpoints_without_manifest, false, any(), free,                                                     \
    "load checkpoints that have no manifest.json (written before manifests existed), without verifying their "         \
    "files; every checkpoint written now has one, and a missing one is otherwise an error")                            \
  K(std::vector<std::string>, logger, (std::vector<std::string>{"console", "jsonl", "tensorboard"}), registry(), free, \
    "where metrics go, a list of: console (a progress line per step), jsonl (metrics.jsonl), tensorboard (event "      \
    "files in the run directory: tensorboard --logdir runs/), wandb and mlflow (trackers: a companion process "        \
    "follows metrics.jsonl, which is then always written, and logs it with the tracker's client; docs/tracking.md)")   \
  K(std::string, project_name, "ppo.cpp", any(), free, "the trackers' project: W&B's project, MLflow's experiment")    \
  K(std::string, experiment_name, "", any(), free,                                                                     \
    "the trackers' run name; empty: the run folder's name (trainer.output_dir's last part)")

struct TrainerConfig {
  PPO_TRAINER_KEYS(PPO_CONFIG_MEMBER)
  template <class F>
  void fields(F&& f) {
    PPO_TRAINER_KEYS(PPO_CONFIG_FIELD)
  }
};

#define PPO_OVERLONG_BUFFER_KEYS(K)                                                                                 \
  K(bool, enable, false, any(), fixed,                                                                              \
    "DAPO's soft overlong punishment (Yu et al. 2025, arXiv:2503.14476; veRL reward_model.overlong_buffer): a "     \
    "response in the last `len` tokens before data.max_response_length loses up to penalty_factor from its score, " \
    "linearly in its length")                                                                                       \
  K(int64_t, len, 0, any(), fixed,                                                                                  \
    "the buffer: penalties start at data.max_response_length - len tokens (1 .. max_response_length)")              \
  K(double, penalty_factor, 1.0, at_least(0), fixed,                                                                \
    "the penalty of a response of data.max_response_length tokens (>= 0)")

struct OverlongBufferConfig {
  PPO_OVERLONG_BUFFER_KEYS(PPO_CONFIG_MEMBER)
  template <class F>
  void fields(F&& f) {
    PPO_OVERLONG_BUFFER_KEYS(PPO_CONFIG_FIELD)
  }
};

#define PPO_REWARD_KEYS(K)                                                                                          \
  K(std::string, function, "", registry(), fixed,                                                                   \
    "built-in reward for every record: exact_match | gsm8k | math | kk | reverse | digit_sum; empty = chosen by "   \
    "each record's data_source")                                                                                    \
  K(std::string, command, "", any(), fixed,                                                                         \
    "external reward program, started once per rank (sh -c): one JSON line per response on stdin, one JSON line "   \
    "with \"score\" back (docs/your-own-task.md); overrides function")                                              \
  K(double, timeout_s, 60.0, above(0), free,                                                                        \
    "reward.command: longest wait in seconds for the next answer line, per line (each answer restarts it, so a "    \
    "long batch of a fast program is fine)")                                                                        \
  K(double, batch_timeout_s, 0, at_least(0), free,                                                                  \
    "reward.command: longest wait in seconds for all the answers of one batch (one rank's responses of a step); 0 " \
    "= none, only timeout_s applies")

struct RewardConfig {
  PPO_REWARD_KEYS(PPO_CONFIG_MEMBER)
  OverlongBufferConfig overlong_buffer;
  template <class F>
  void fields(F&& f) {
    PPO_REWARD_KEYS(PPO_CONFIG_FIELD)
    f("overlong_buffer", overlong_buffer);
  }
};

#define PPO_PARALLEL_KEYS(K)                                                                                       \
  K(std::string, backend, "auto", registry(), free,                                                                \
    "collectives: auto (NCCL for CUDA tensors when each rank of a host has its own GPU, else MPI) | mpi | nccl")   \
  K(bool, pad_to_world, false, any(), fixed,                                                                       \
    "pad the global batch with masked copies to a multiple of the world size")                                     \
  K(int64_t, check_params_freq, 0, at_least(0), free, "checksum parameters across ranks every N steps; 0 = never") \
  K(double, timeout_s, 600.0, at_least(0), free,                                                                   \
    "longest wait in seconds inside one collective (a stopped rank, a lost host or link): the job then ends with " \
    "an error naming the collective and the rank; 0 = wait forever")                                               \
  K(int64_t, zero_stage, 0, between(0, 3), free,                                                                   \
    "ZeRO sharding of the actor's and critic's state over the ranks: 0 = none (every rank holds everything), 1 = " \
    "AdamW state, 2 = and gradients, 3 = and parameters (gathered layer by layer for each forward and backward, "  \
    "the whole policy once per rollout; the reference model keeps only its shard)")                                \
  K(bool, check_collectives, true, any(), free,                                                                    \
    "before each collective the ranks compare what they are about to issue (name, dtype, size): a rank whose "     \
    "sequence differs ends the job with an error naming both, instead of a hang")                                  \
  K(int64_t, rollout_ranks, 0, at_least(0), free,                                                                  \
    "ppo train: the last N ranks only generate and score (rollout ranks), the others only train and send them "    \
    "the weights after each step; 0 = every rank does both in turn")

struct ParallelConfig {
  PPO_PARALLEL_KEYS(PPO_CONFIG_MEMBER)
  template <class F>
  void fields(F&& f) {
    PPO_PARALLEL_KEYS(PPO_CONFIG_FIELD)
  }
};

#define PPO_ASYNC_KEYS(K)                                                                                            \
  K(int64_t, max_staleness, 0, between(0, 1), fixed,                                                                 \
    "with parallel.rollout_ranks: policy versions a batch may lag the weights it trains: 0 = the rollout of step t " \
    "+ 1 waits for step t's weights; 1 = it runs while the trainers update on step t's batch (one step off-policy)")

struct AsyncConfig {
  PPO_ASYNC_KEYS(PPO_CONFIG_MEMBER)
  template <class F>
  void fields(F&& f) {
    PPO_ASYNC_KEYS(PPO_CONFIG_FIELD)
  }
};

struct Config {
  DataConfig data;
  ModelConfig model;
  ActorConfig actor;
  RolloutConfig rollout;
  RefConfig ref;
  CriticConfig critic;
  AlgorithmConfig algorithm;
  TrainerConfig trainer;
  RewardConfig reward;
  RewardModelConfig reward_model;
  DistillationConfig distillation;
  ParallelConfig parallel;
  AsyncConfig async;
  template <class F>
  void fields(F&& f) {
    f("data", data);
    f("model", model);
    f("actor", actor);
    f("rollout", rollout);
    f("ref", ref);
    f("critic", critic);
    f("algorithm", algorithm);
    f("trainer", trainer);
    f("reward", reward);
    f("reward_model", reward_model);
    f("distillation", distillation);
    f("parallel", parallel);
    f("async", async);
  }
};

}  // namespace ppo
