// Packed sequences (veRL's use_remove_padding, OpenRLHF's packing, TRL's padding_free): the real tokens of a padded
// micro-batch laid end to end in one [1, N] sequence, so that the forward spends nothing on padding. Position ids
// restart with every sequence, attention stays within each (AttentionInputs::packed: the plan of its buckets, below),
// and the results at the response positions are scattered back to [B, R] for the losses.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "common/batch.h"

namespace ppo {

struct PackedSequences {
  torch::Tensor input_ids;       // [1, N] int64: every row's real tokens, row after row
  torch::Tensor position_ids;    // [1, N] int64: the padded batch's positions of those tokens (0 .. length - 1)
  std::vector<int64_t> lengths;  // [B] real tokens of each row (a row with none has 0: it is skipped)
  // The M real response tokens: which packed position predicts each (its previous token's), where its result goes in
  // the flattened [B, R], and the token itself.
  torch::Tensor predictors;     // [M] int64, positions in [0, N)
  torch::Tensor targets;        // [M] int64, b * R + j
  torch::Tensor labels;         // [M] int64
  int64_t rows = 0;             // B
  int64_t response_length = 0;  // R

  int64_t tokens() const { return input_ids.size(1); }  // N
  PackedSequences to(const torch::Device& device) const;
};

// Packs input_ids [B, P + R] by attention_mask (1 = real) with position_ids, R = response_length (the last R columns
// are the response). Real tokens keep their order within a row; a response token at column c is predicted by the
// token at column c - 1, which must be real too (prompts are left-padded and responses right-padded). The result is
// on the host (pack a micro-batch before moving it to the device: then nothing waits for the device).
PackedSequences pack_sequences(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                               const torch::Tensor& position_ids, int64_t response_length);
// The same for a batch's fields input_ids, attention_mask, position_ids and responses (for R).
PackedSequences pack_sequences(const Batch& batch);

// values [M, ...] at the packed response tokens -> [B, R, ...], zero where no real response token is.
// Differentiable in `values`.
torch::Tensor unpack_responses(const PackedSequences& packed, const torch::Tensor& values);

// Packed sequences of similar length, attended together as a padded [n, heads, L, Dh] batch (model/attention.h).
struct SegmentBucket {
  torch::Tensor gather;           // [n * L] int64: the packed position each padded slot reads (padding slots read 0)
  torch::Tensor bias;             // [n, 1, L, L] additive mask: causal, and padding keys masked
  int64_t count = 0, length = 0;  // n, L
};

// The attention plan of one packed forward: sequences sorted by length and cut into at most `max_buckets` buckets
// so that the padded attention work plus the buckets' fixed cost is least (an exact dynamic programme): a bucket's L
// is its longest sequence's length rounded up to a multiple of 64 (so that rounding does not depend on which
// sequences share a micro-batch), its work n x L^2 x `width` multiply-adds, its fixed cost kBucketCost (the host time
// of its dozen attention calls per layer, forward and backward, about 100 us on a CPU core, at about 1.6e11
// multiply-adds per second). Long sequences get buckets of their own; many short ones share few. `order` [N] int64: for
// each packed position, its slot among the buckets' padded slots laid end to end. `bias_dtype`: as
// AttentionInputs::bias. `sliding_window` > 0: a key more than sliding_window - 1 positions before its query is
// masked too (model.sliding_window).
struct PackedAttention {
  std::vector<SegmentBucket> buckets;
  torch::Tensor order;
};
inline constexpr double kBucketCost = 1 << 24;
inline constexpr int64_t kMaxBuckets = 8;
PackedAttention plan_packed_attention(const std::vector<int64_t>& lengths, int64_t width, torch::ScalarType bias_dtype,
                                      torch::Device device, int64_t max_buckets = kMaxBuckets,
                                      int64_t sliding_window = 0);

}  // namespace ppo
