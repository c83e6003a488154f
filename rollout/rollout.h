// Rollout: batched autoregressive generation with a KV cache and layout-independent seeded sampling, plus
// log-probabilities of given responses under a policy (the actor's and reference's "compute_log_prob").
// Conventions follow veRL: prompts are left-padded, responses right-padded, position_ids = cumsum(mask) - 1,
// log-probs are taken under softmax(logits / temperature) over the full vocabulary (top-k / top-p only restrict
// which tokens may be sampled).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "decode/generation.h"
#include "decode/sampling.h"
#include "model/packing.h"
#include "model/transformer.h"

namespace ppo {

struct RolloutOutput {
  torch::Tensor prompts;         // [B, P] left-padded prompt ids
  torch::Tensor responses;       // [B, R] R = max_new_tokens, right-padded with pad_id
  torch::Tensor input_ids;       // [B, P + R]
  torch::Tensor attention_mask;  // [B, P + R] int64, 1 on real prompt tokens and real response tokens (EOS included)
  torch::Tensor position_ids;    // [B, P + R] cumsum(attention_mask) - 1, clamped at 0
  torch::Tensor response_mask;   // [B, R] float, 1 up to and including EOS (multi-turn: on sampled tokens only)
  torch::Tensor log_probs;       // [B, R] float, log-prob of each sampled token under softmax(logits / temperature)
  // With GenerationParams::record_routing: [B, P + R, MoE layers, k] int32, the experts each token was routed to
  // where it went through the model (-1 elsewhere: padding, a response's last token, multi-turn's appended tokens).
  torch::Tensor routed_experts;
};

// Generates one response per prompt. `seeds` holds one seed per row: the uniforms a row samples with depend only
// on its seed and the token index, so a row's response does not depend on the batch it is generated in, nor on
// when it enters it (up to float rounding of the logits). With the KV cache, decoding is continuous batching: at
// most micro_batch_size rows decode together, and a finished row's slot takes the next waiting prompt, so the
// batch stays full while responses end at different lengths. Runs without autograd; outputs live on the model's
// device.
// Throws UsageError on bad parameters (naming rollout.* keys) or on a prompt that is empty or wider than P.
RolloutOutput generate_responses(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                 const std::vector<uint64_t>& seeds, const GenerationParams& p);

// What compute_log_probs gives beside the log-probs of the response tokens.
struct LogProbOptions {
  bool entropy = true;     // each position's entropy (old and reference log-probs need none)
  bool argmax = false;     // each position's most likely token (distillation's agreement with the teacher)
  int64_t topk = 0;        // > 0: each position's topk most likely tokens, their log-probs and ids (a teacher's)
  int64_t topk_vocab = 0;  // > 0: those tokens among the first topk_vocab ids only (the student's vocabulary)
  torch::Tensor at_ids;  // defined: the log-probs of these K tokens at each position ([B, R, K] int64; packed: [M, K])
};

struct TokenLogProbs {
  torch::Tensor log_probs;      // [B, R]
  torch::Tensor entropy;        // [B, R] (LogProbOptions::entropy)
  torch::Tensor argmax;         // [B, R] int64 (LogProbOptions::argmax)
  torch::Tensor top_log_probs;  // [B, R, topk] (LogProbOptions::topk), most likely first
  torch::Tensor top_ids;        // [B, R, topk] int64
  torch::Tensor at_log_probs;   // [B, R, K] (LogProbOptions::at_ids)
};
// TokenLogProbs' fields, for what is done to each that is defined (concatenating, unpacking, gathering).
inline const std::vector<torch::Tensor TokenLogProbs::*> kTokenLogProbFields = {
    &TokenLogProbs::log_probs,     &TokenLogProbs::entropy, &TokenLogProbs::argmax,
    &TokenLogProbs::top_log_probs, &TokenLogProbs::top_ids, &TokenLogProbs::at_log_probs};
// The results of several micro-batches as one: each field that parts[0] has, its parts joined by `join`.
TokenLogProbs join_token_log_probs(const std::vector<TokenLogProbs>& parts,
                                   const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& join);

// One forward over input_ids [B, T] (attention_mask, position_ids [B, T]); log-probs of the last R = response_length
// tokens under softmax(logits / temperature) (temperature <= 0 counts as 1), and what `options` asks for besides. Only
// the R positions that predict response tokens go through the LM head. Processes micro_batch_size rows at a time
// (<= 0 = all at once). Differentiable when autograd is enabled (the actor's update uses it), but for argmax and the
// top tokens.
TokenLogProbs compute_log_probs(CausalLM& model, const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                const torch::Tensor& position_ids, int64_t response_length, double temperature,
                                int64_t micro_batch_size = 0, const LogProbOptions& options = {});

// The same over packed sequences (model/packing.h, on the model's device): the LM head runs on the M real response
// positions only; every result [B, R, ...], 0 where no real response token is.
TokenLogProbs compute_log_probs_packed(CausalLM& model, const PackedSequences& packed, double temperature,
                                       const LogProbOptions& options = {});

// Whether `model`'s logits for one prompt are all finite: one forward and one host read. A model whose weights are
// NaN, or whose config makes them overflow, would otherwise generate empty or random text without a word.
bool logits_finite(CausalLM& model, const std::vector<int64_t>& prompt, torch::Device device);

}  // namespace ppo
