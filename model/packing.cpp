#include "model/packing.h"

#include <algorithm>
#include <numeric>

#include "model/masks.h"

namespace ppo {

PackedSequences PackedSequences::to(const torch::Device& device) const {
  PackedSequences out = *this;
  for (torch::Tensor* t : {&out.input_ids, &out.position_ids, &out.predictors, &out.targets, &out.labels})
    *t = t->to(device);
  return out;
}

PackedSequences pack_sequences(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                               const torch::Tensor& position_ids, int64_t response_length) {
  const int64_t B = input_ids.size(0), T = input_ids.size(1), R = response_length;
  TORCH_CHECK(
      input_ids.dim() == 2 && attention_mask.sizes() == input_ids.sizes() && position_ids.sizes() == input_ids.sizes(),
      "pack_sequences: input_ids, attention_mask and position_ids must all be [B, T]");
  TORCH_CHECK(R >= 1 && R < T, "pack_sequences: response_length ", R, " must be in [1, ", T - 1, "]");
  // On the host, element by element: no tensor operator reads a value back (the update's host-read count stays
  // per mini-batch), and the batch is small next to the forward.
  const torch::Tensor ids = input_ids.to(torch::kCPU, torch::kLong).contiguous();
  const torch::Tensor mask = attention_mask.to(torch::kCPU, torch::kLong).contiguous();
  const torch::Tensor positions = position_ids.to(torch::kCPU, torch::kLong).contiguous();
  const auto id = ids.accessor<int64_t, 2>(), real = mask.accessor<int64_t, 2>(),
             pos = positions.accessor<int64_t, 2>();
  std::vector<int64_t> packed_ids, packed_positions, packed_at(static_cast<size_t>(B * T), -1);
  std::vector<int64_t> predictors, targets, labels;
  PackedSequences p;
  p.rows = B;
  p.response_length = R;
  p.lengths.assign(static_cast<size_t>(B), 0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      if (real[b][t] == 0) continue;
      packed_at[b * T + t] = static_cast<int64_t>(packed_ids.size());
      packed_ids.push_back(id[b][t]);
      packed_positions.push_back(pos[b][t]);
      ++p.lengths[b];
    }
    for (int64_t j = 0; j < R; ++j) {
      const int64_t column = T - R + j;
      if (real[b][column] == 0) continue;
      TORCH_CHECK(real[b][column - 1] != 0, "pack_sequences: row ", b, "'s response token ", j,
                  " follows a padding position");
      predictors.push_back(packed_at[b * T + column - 1]);
      targets.push_back(b * R + j);
      labels.push_back(id[b][column]);
    }
  }
  const auto as_tensor = [](const std::vector<int64_t>& v) { return torch::tensor(v, torch::kLong); };
  p.input_ids = as_tensor(packed_ids).unsqueeze(0);
  p.position_ids = as_tensor(packed_positions).unsqueeze(0);
  p.predictors = as_tensor(predictors);
  p.targets = as_tensor(targets);
  p.labels = as_tensor(labels);
  return p;
}

PackedSequences pack_sequences(const Batch& batch) {
  return pack_sequences(batch.at(field::input_ids), batch.at(field::attention_mask), batch.at(field::position_ids),
                        batch.at(field::responses).size(1));
}

torch::Tensor unpack_responses(const PackedSequences& packed, const torch::Tensor& values) {
  std::vector<int64_t> shape = values.sizes().vec();
  shape[0] = packed.rows * packed.response_length;
  torch::Tensor out = torch::zeros(shape, values.options()).index_copy(0, packed.targets, values);
  shape[0] = packed.response_length;
  shape.insert(shape.begin(), packed.rows);
  return out.view(shape);
}

// ---------------------------------------------------------------------------------------------------- attention plan

namespace {

// A bucket's padded length: its longest sequence's, rounded up to a multiple of 64. The softmax and the
// probabilities-times-values product reduce over the bucket's length, and their rounding depends on it; with this,
// a sequence of up to 64 tokens is attended alike whichever sequences share its micro-batch (so N ranks, which
// group rows differently, compute what one rank does), and longer ones mostly are.
int64_t bucket_width(int64_t longest) {
  return (longest + 63) / 64 * 64;
}

}  // namespace

PackedAttention plan_packed_attention(const std::vector<int64_t>& lengths, int64_t width, torch::ScalarType bias_dtype,
                                      torch::Device device, int64_t max_buckets, int64_t sliding_window) {
  std::vector<int64_t> starts(lengths.size(), 0), sorted;  // sorted: the non-empty sequences, longest first
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (i > 0) starts[i] = starts[i - 1] + lengths[i - 1];
    if (lengths[i] > 0) sorted.push_back(static_cast<int64_t>(i));
  }
  std::stable_sort(sorted.begin(), sorted.end(), [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
  // best[k][i]: the least cost of sequences i.. in at most k buckets; a bucket starting at i is padded to lengths[i].
  const int64_t n = static_cast<int64_t>(sorted.size()), buckets = std::max<int64_t>(1, std::min(max_buckets, n));
  const auto work = [&](int64_t i, int64_t end) {
    const double l = static_cast<double>(bucket_width(lengths[sorted[i]]));
    return static_cast<double>(end - i) * l * l * static_cast<double>(width) + kBucketCost;
  };
  std::vector<std::vector<double>> best(buckets + 1, std::vector<double>(n + 1, 0));
  std::vector<std::vector<int64_t>> cut(buckets + 1, std::vector<int64_t>(n + 1, n));
  for (int64_t i = 0; i < n; ++i) best[1][i] = work(i, n);
  for (int64_t k = 2; k <= buckets; ++k) {
    for (int64_t i = 0; i < n; ++i) {
      best[k][i] = best[k - 1][i];
      cut[k][i] = cut[k - 1][i];
      for (int64_t end = i + 1; end < n; ++end) {
        const double w = work(i, end) + best[k - 1][end];
        if (w < best[k][i]) {
          best[k][i] = w;
          cut[k][i] = end;
        }
      }
    }
  }
  PackedAttention plan;
  std::vector<int64_t> order(static_cast<size_t>(std::accumulate(lengths.begin(), lengths.end(), int64_t{0})));
  int64_t slots = 0;  // the padded slots of the buckets before this one
  const auto on_device = [&](const std::vector<int64_t>& v) { return torch::tensor(v, torch::kLong).to(device); };
  for (int64_t i = 0, k = buckets; i < n; --k) {
    const int64_t end = k == 1 ? n : cut[k][i];
    SegmentBucket b;
    b.count = end - i;
    b.length = bucket_width(lengths[sorted[i]]);
    std::vector<int64_t> gather(static_cast<size_t>(b.count * b.length), 0), key_lengths;
    for (int64_t s = 0; s < b.count; ++s) {
      const int64_t row = sorted[i + s];
      key_lengths.push_back(lengths[row]);
      for (int64_t t = 0; t < lengths[row]; ++t) {
        gather[s * b.length + t] = starts[row] + t;
        order[starts[row] + t] = slots + s * b.length + t;
      }
    }
    slots += b.count * b.length;
    b.gather = on_device(gather);
    const auto positions = torch::arange(b.length, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto causal = positions.unsqueeze(0).le(positions.unsqueeze(1));  // [L, L] key <= query
    if (sliding_window > 0) causal.logical_and_(positions.unsqueeze(0).gt(positions.unsqueeze(1) - sliding_window));
    const auto real_key = positions.unsqueeze(0).lt(on_device(key_lengths).unsqueeze(1));  // [n, L]
    b.bias = attention_bias(causal.unsqueeze(0).logical_and(real_key.unsqueeze(1)).unsqueeze(1), bias_dtype);
    plan.buckets.push_back(std::move(b));
    i = end;
  }
  plan.order = on_device(order);
  return plan;
}

}  // namespace ppo
