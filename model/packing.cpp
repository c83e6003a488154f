#include "model/packing.h"

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

}  // namespace ppo
