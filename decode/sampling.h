// Sampling: per-row seeds and uniforms, the inverse-CDF sampler (an ATen path, and a loop for float32 logits on the
// CPU), and the log-probs and entropy of logits.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <utility>

namespace ppo {

// splitmix64 hash (common/random.h) of (seed, step, prompt_index, sample_index): the seed of one rollout row.
uint64_t sample_seed(uint64_t seed, int64_t step, int64_t prompt_index, int64_t sample_index);

// Uniform double in [0, 1) for token `t` of the row seeded with `seed` (53 bits of a splitmix64 hash).
double token_uniform(uint64_t seed, int64_t t);

// The sampling distribution in vocabulary order: softmax(logits / temperature), restricted to the top_k most likely
// tokens, then to the smallest set of most likely tokens of mass >= top_p (always at least one token; ties in
// vocabulary order), renormalised; excluded entries are 0. Only the restrictions sort the vocabulary.
// logits [B, V] -> [B, V] float64.
torch::Tensor sampling_probs(const torch::Tensor& logits, double temperature, int64_t top_k, double top_p);

struct Sampled {
  torch::Tensor tokens;     // [B] int64
  torch::Tensor log_probs;  // [B] float32: log softmax(logits / temperature)[token] over the full vocabulary
};
// Inverse-CDF sampling in vocabulary order: row b takes the first token whose cumulative probability (float64)
// exceeds uniforms[b] times the total. temperature <= 0 = greedy argmax (uniforms ignored; log-probs at
// temperature 1). logits [B, V], uniforms [B] float64.
// Float32 logits on the CPU without top-k or top-p take one loop per row with no ATen op (the same distribution;
// exp(z - max) summed in float64 instead of exp(log_softmax(z))); the rest runs as ATen ops.
Sampled sample(const torch::Tensor& logits, const torch::Tensor& uniforms, double temperature, int64_t top_k,
               double top_p);
// sample() written into tokens [B] int64 and log_probs [B] float32 (in place: what the decode step does).
void sample_into(const torch::Tensor& logits, const torch::Tensor& uniforms, double temperature, int64_t top_k,
                 double top_p, const torch::Tensor& tokens, const torch::Tensor& log_probs);
// The tokens of `sample`.
torch::Tensor sample_tokens(const torch::Tensor& logits, const torch::Tensor& uniforms, double temperature,
                            int64_t top_k, double top_p);

// log softmax(logits)[labels]: [B, T, V], [B, T] -> [B, T] float32 (computed as gathered logit - logsumexp).
torch::Tensor log_probs_from_logits(const torch::Tensor& logits, const torch::Tensor& labels);
// log softmax(logits) at K tokens of each position: [B, T, V], ids [B, T, K] int64 -> [B, T, K] float32. One gather,
// so its gradient is one [B, T, V] buffer however many tokens each position asks for.
torch::Tensor log_probs_at(const torch::Tensor& logits, const torch::Tensor& ids);
// The k most likely tokens of each position among the first `vocab` ids (0: all), most likely first: their log-probs
// over the whole vocabulary [B, T, k] float32 and ids [B, T, k] int64. No gradient.
std::pair<torch::Tensor, torch::Tensor> top_log_probs(const torch::Tensor& logits, int64_t k, int64_t vocab = 0);

// Entropy of softmax(logits): [B, T, V] -> [B, T] float32 (logsumexp - sum softmax * logits, as veRL).
torch::Tensor entropy_from_logits(const torch::Tensor& logits);

}  // namespace ppo
