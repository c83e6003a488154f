// The continuous-batching decoder (continuous_decoder.cpp) and what it shares with rollout/rollout.cpp: left-padded
// prompts, the table of sampling uniforms and the decoders' output.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "decode/generation.h"
#include "model/transformer.h"

namespace ppo {

struct LeftPadded {
  torch::Tensor ids;   // [B, P]
  torch::Tensor mask;  // [B, P] int64
};

// The prompts, left-padded with pad_id to `width` (rollout/rollout.cpp).
LeftPadded left_pad(const std::vector<std::vector<int64_t>>& prompts, int64_t width, int64_t pad_id);

// The uniforms of every row and token, [B * R + extra] float64 on `device` (the extra entries, 0.5, are the
// scratch slots' of the continuous-batching decoder). One host-to-device copy per generation.
torch::Tensor uniform_table(const std::vector<uint64_t>& seeds, int64_t R, int64_t extra, torch::Device device);

struct Generated {
  torch::Tensor responses;  // [B, R]
  torch::Tensor log_probs;  // [B, R]
  // Multi-turn only (host): 1 on sampled tokens, and 1 on every real response token (appended ones included).
  torch::Tensor response_mask, response_attention;  // [B, R] float, int64
  torch::Tensor routed_experts;                     // p.record_routing: RolloutOutput's
};

// The responses to the left-padded prompts ids, mask [B, P] (on the device), continuously batched over a KV cache:
// the ContinuousDecoder of continuous_decoder.cpp.
Generated generate_continuous(CausalLM& model, const torch::Tensor& ids, const torch::Tensor& mask,
                              const std::vector<uint64_t>& seeds, const GenerationParams& p);

}  // namespace ppo
