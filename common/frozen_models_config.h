// The config sections of the frozen models beside the policy and its reference, each read from a folder of its own:
// the learned reward model (reward_model.*) and on-policy distillation's teacher (distillation.*). Schema rows as in
// common/config.h.
#pragma once

#include <cstdint>
#include <string>

#include "common/config_schema.h"
#include "common/worker_config.h"

namespace ppo {

// A learned reward model (veRL's reward_model section; TRL's and OpenRLHF's behaviour where veRL has none): a Hugging
// Face *ForSequenceClassification folder that scores each response at its last token (model/reward_model.h), combined
// with the rule reward (train/model_reward.h).
#define PPO_REWARD_MODEL_PATH_KEYS(K)                                                                              \
  K(std::string, path, "", any(), fixed,                                                                           \
    "the reward model's folder: a *ForSequenceClassification with one label (Qwen2, Llama, Qwen3, Mistral), with " \
    "its tokenizer.json and chat template")

struct RewardModelPathConfig {
  PPO_REWARD_MODEL_PATH_KEYS(PPO_CONFIG_MEMBER)
  template <class F>
  void fields(F&& f) {
    PPO_REWARD_MODEL_PATH_KEYS(PPO_CONFIG_FIELD)
  }
};

#define PPO_REWARD_MODEL_KEYS(K)                                                                                      \
  K(bool, enable, false, any(), fixed,                                                                                \
    "ppo train: score each response with the reward model at reward_model.model.path, on the ranks that generate")    \
  K(int64_t, micro_batch_size_per_gpu, 16, between(1, k24), free, "responses per forward of the reward model")        \
  K(double, weight, 1.0, any(), fixed, "the reward model's score's weight in the reward")                             \
  K(double, rule_weight, 0.0, any(), fixed,                                                                           \
    "the rule reward's weight in the reward (reward.function, the data source's, or reward.command); 0 = the reward " \
    "model's score alone, as veRL (the rule still gives acc and validation's metrics)")                               \
  K(bool, normalize, false, any(), fixed,                                                                             \
    "the score minus the running mean of every score so far, over their running standard deviation (TRL's "           \
    "use_score_norm, OpenRLHF's normalize_reward); the moments are kept in checkpoints")                              \
  K(double, clip, 0.0, at_least(0), fixed,                                                                            \
    "clip the (normalised) score to [-clip, clip] (TRL's score_clip, OpenRLHF's reward_clip_range); 0 = none")

struct RewardModelConfig {
  PPO_REWARD_MODEL_KEYS(PPO_CONFIG_MEMBER)
  RewardModelPathConfig model;
  OffloadConfig offload;  // param only: a frozen model has no gradients or optimizer state
  template <class F>
  void fields(F&& f) {
    PPO_REWARD_MODEL_KEYS(PPO_CONFIG_FIELD)
    f("model", model);
    f("offload", offload);
  }
};

// On-policy distillation (veRL's distillation section, its keys where they fit): a frozen teacher scores the student's
// own rollouts token by token (train/distillation.h, rl/distillation.h).
#define PPO_DISTILLATION_TEACHER_MODEL_KEYS(K)                                                                     \
  K(std::string, path, "", any(), fixed,                                                                           \
    "the teacher: a Hugging Face folder (config.json, safetensors, its tokenizer) or a ppo.cpp checkpoint folder " \
    "(global_step_N, its shape from the run's config.yaml); it must share the student's tokenizer")

struct DistillationTeacherModelConfig {
  PPO_DISTILLATION_TEACHER_MODEL_KEYS(PPO_CONFIG_MEMBER)
  template <class F>
  void fields(F&& f) {
    PPO_DISTILLATION_TEACHER_MODEL_KEYS(PPO_CONFIG_FIELD)
  }
};

#define PPO_DISTILLATION_TEACHER_KEYS(K) \
  K(int64_t, log_prob_micro_batch_size_per_gpu, 16, between(1, k24), free, "responses per forward pass of the teacher")

struct DistillationTeacherConfig {
  PPO_DISTILLATION_TEACHER_KEYS(PPO_CONFIG_MEMBER)
  DistillationTeacherModelConfig model;
  OffloadConfig offload;  // param only: a frozen model has no gradients or optimizer state
  template <class F>
  void fields(F&& f) {
    PPO_DISTILLATION_TEACHER_KEYS(PPO_CONFIG_FIELD)
    f("model", model);
    f("offload", offload);
  }
};

#define PPO_DISTILLATION_KEYS(K)                                                                                      \
  K(bool, enable, false, any(), fixed,                                                                                \
    "ppo train: the teacher at distillation.teacher.model.path computes the log-prob of every token the student "     \
    "sampled, on the trainer ranks, and its signal trains the student (on-policy distillation)")                      \
  K(std::string, loss_mode, "reverse_kl_reward", registry(), fixed, "the teacher's signal:")                          \
  K(double, distillation_loss_coef, 1.0, above(0), fixed, "the weight of the distillation loss, or of the KL reward") \
  K(bool, use_policy_loss, false, any(), fixed,                                                                       \
    "also train on the task's reward: in reverse_kl_reward its score is added to the KL reward; in the loss modes "   \
    "the policy loss on its advantages stays beside the distillation loss (false: the teacher's signal alone)")       \
  K(double, loss_clamp, 0.0, at_least(0), fixed,                                                                      \
    "the loss modes: each token's distillation loss capped at this (veRL's loss_clamp); 0 = none")                    \
  K(int64_t, topk, 128, between(1, k24), fixed,                                                                       \
    "the top-k loss modes: how many of the teacher's most likely tokens of each position the loss covers (at most "   \
    "the vocabulary)")                                                                                                \
  K(double, jsd_beta, 0.5, interval(0, true, 1, true), fixed,                                                         \
    "jsd_topk: the weight of KL(teacher || mixture); the mixture is beta teacher + (1 - beta) student")

struct DistillationConfig {
  PPO_DISTILLATION_KEYS(PPO_CONFIG_MEMBER)
  DistillationTeacherConfig teacher;
  template <class F>
  void fields(F&& f) {
    PPO_DISTILLATION_KEYS(PPO_CONFIG_FIELD)
    f("teacher", teacher);
  }
};

}  // namespace ppo
