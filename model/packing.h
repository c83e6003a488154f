// Packed sequences (veRL's use_remove_padding, OpenRLHF's packing, TRL's padding_free): the real tokens of a padded
// micro-batch laid end to end in one [1, N] sequence, so that the forward spends nothing on padding. Position ids
// restart with every sequence, attention stays within each (AttentionInputs::segments), and the results at the
// response positions are scattered back to [B, R] for the losses.
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

}  // namespace ppo
