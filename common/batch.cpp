#include "common/batch.h"

#include <algorithm>
#include <iostream>
#include <numeric>
#include <set>

#include "common/error.h"

namespace ppo {

int64_t Batch::size() const {
  return fields.empty() ? 0 : fields.begin()->second.size(0);
}

const torch::Tensor& Batch::at(const std::string& name) const {
  auto it = fields.find(name);
  if (it == fields.end()) throw std::runtime_error("batch has no field '" + name + "'");
  return it->second;
}

void Batch::set(const std::string& name, torch::Tensor value) {
  TORCH_CHECK(value.dim() >= 1, "batch field '", name, "' must have a sample dimension");
  if (!fields.empty() && fields.count(name) == 0)
    TORCH_CHECK(value.size(0) == size(), "batch field '", name, "' has ", value.size(0), " rows, batch has ", size());
  fields[name] = std::move(value);
}

Batch Batch::select(const torch::Tensor& rows) const {
  Batch out;
  for (const auto& [name, t] : fields) out.fields[name] = t.index_select(0, rows.to(t.device()));
  return out;
}

Batch Batch::slice(int64_t begin, int64_t end) const {
  Batch out;
  for (const auto& [name, t] : fields) out.fields[name] = t.slice(0, begin, end);
  return out;
}

std::vector<Batch> Batch::chunk(int64_t parts) const {
  TORCH_CHECK(parts >= 1 && size() % parts == 0, "batch of ", size(), " cannot be split into ", parts, " equal chunks");
  return split(size() / parts);
}

std::vector<Batch> Batch::split(int64_t piece) const {
  TORCH_CHECK(piece >= 1, "split size must be >= 1");
  std::vector<Batch> out;
  for (int64_t begin = 0; begin < size(); begin += piece) out.push_back(slice(begin, std::min(size(), begin + piece)));
  return out;
}

Batch Batch::concat(const std::vector<Batch>& parts) {
  Batch out;
  if (parts.empty()) return out;
  for (const auto& [name, first] : parts.front().fields) {
    std::vector<torch::Tensor> pieces;
    for (const auto& p : parts) pieces.push_back(p.at(name));
    out.fields[name] = torch::cat(pieces, 0);
  }
  return out;
}

Batch Batch::to(const torch::Device& device) const {
  Batch out;
  for (const auto& [name, t] : fields) out.fields[name] = t.to(device);
  return out;
}

void Batch::check() const {
  for (const auto& [name, t] : fields) {
    TORCH_CHECK(t.size(0) == size(), "batch field '", name, "' has ", t.size(0), " rows, expected ", size());
  }
  if (has(field::responses) && has(field::response_mask))
    TORCH_CHECK(at(field::responses).sizes() == at(field::response_mask).sizes(),
                "responses and response_mask differ in shape");
  if (has(field::input_ids) && has(field::attention_mask))
    TORCH_CHECK(at(field::input_ids).sizes() == at(field::attention_mask).sizes(),
                "input_ids and attention_mask differ");
}

// ---- micro-batches ----

// Counted on the host element by element (a batch waits there before its micro-batches move to the device): no
// tensor operator reads a value back, so the update phases' host reads stay one per mini-batch.
std::vector<RowLengths> row_lengths(const Batch& batch) {
  const int64_t P = batch.at(field::prompts).size(1);
  const torch::Tensor mask = batch.at(field::attention_mask).to(torch::kCPU, torch::kLong).contiguous();
  const auto real = mask.accessor<int64_t, 2>();
  std::vector<RowLengths> out(static_cast<size_t>(batch.size()));
  for (int64_t b = 0; b < batch.size(); ++b)
    for (int64_t t = 0; t < mask.size(1); ++t) (t < P ? out[b].prompt : out[b].response) += real[b][t] != 0;
  return out;
}

namespace {

struct Group {
  std::vector<int64_t> rows;
  int64_t prompt = 0, response = 0, tokens = 0;
  // Padded: rows x (longest prompt + longest response); packed: the real tokens.
  int64_t cost_with(const RowLengths& l, bool packed) const {
    if (packed) return tokens + l.prompt + l.response;
    return static_cast<int64_t>(rows.size() + 1) * (std::max(prompt, l.prompt) + std::max(response, l.response));
  }
  void add(int64_t row, const RowLengths& l) {
    rows.push_back(row);
    prompt = std::max(prompt, l.prompt);
    response = std::max(response, l.response);
    tokens += l.prompt + l.response;
  }
};

// Greedy contiguous packing of `order` with every group's cost <= cap (a single row always fits).
std::vector<Group> pack(const std::vector<int64_t>& order, const std::vector<RowLengths>& lengths, int64_t cap,
                        bool packed) {
  std::vector<Group> groups;
  for (int64_t row : order) {
    if (groups.empty() || groups.back().cost_with(lengths[row], packed) > cap) groups.emplace_back();
    groups.back().add(row, lengths[row]);
  }
  return groups;
}

}  // namespace

std::vector<std::vector<int64_t>> partition_by_tokens(const std::vector<RowLengths>& lengths, int64_t max_tokens,
                                                      std::vector<int64_t>* over_budget, bool packed) {
  TORCH_CHECK(max_tokens >= 1, "partition_by_tokens: the budget must be >= 1");
  std::vector<int64_t> order, over;
  int64_t longest = 1;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t total = lengths[i].prompt + lengths[i].response;
    if (total > max_tokens) {
      over.push_back(static_cast<int64_t>(i));
    } else {
      order.push_back(static_cast<int64_t>(i));
      longest = std::max(longest, total);
    }
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return lengths[a].prompt + lengths[a].response > lengths[b].prompt + lengths[b].response;
  });
  // Fewest groups within the budget, then the smallest cap that still gives that many (binary search: the greedy
  // count never grows with the cap).
  const size_t fewest = pack(order, lengths, max_tokens, packed).size();
  int64_t low = longest, high = max_tokens;
  while (low < high) {
    const int64_t mid = low + (high - low) / 2;
    if (pack(order, lengths, mid, packed).size() <= fewest)
      high = mid;
    else
      low = mid + 1;
  }
  std::vector<std::vector<int64_t>> out;
  for (Group& g : pack(order, lengths, high, packed)) out.push_back(std::move(g.rows));
  for (int64_t row : over) out.push_back({row});
  if (over_budget) *over_budget = over;
  return out;
}

Batch trim_padding(const Batch& batch) {
  const int64_t P = batch.at(field::prompts).size(1), R = batch.at(field::responses).size(1);
  int64_t longest_prompt = 0, longest_response = 1;  // at least one response column stays
  for (const RowLengths& l : row_lengths(batch)) {
    longest_prompt = std::max(longest_prompt, l.prompt);
    longest_response = std::max(longest_response, l.response);
  }
  const int64_t drop = P - longest_prompt;
  if (drop == 0 && longest_response == R) return batch;
  static const std::set<std::string> sequence_fields = {field::input_ids, field::attention_mask, field::position_ids};
  Batch out;
  for (const auto& [name, t] : batch.fields) {
    if (t.dim() < 2)
      out.fields[name] = t;
    else if (name == field::prompts)
      out.fields[name] = t.narrow(1, drop, longest_prompt);
    else if (sequence_fields.count(name))
      out.fields[name] = t.narrow(1, drop, longest_prompt + longest_response);
    else
      out.fields[name] = t.narrow(1, 0, longest_response);
  }
  return out;
}

std::vector<MicroBatch> make_micro_batches(const Batch& batch, const MicroBatchSpec& spec) {
  std::vector<std::vector<int64_t>> groups;
  if (spec.max_tokens > 0) {
    std::vector<int64_t> over;
    groups = partition_by_tokens(row_lengths(batch), spec.max_tokens, &over, spec.packed);
    if (!over.empty())
      std::cerr << "warning: " << over.size() << " sequence(s) longer than " << spec.budget_key << "="
                << spec.max_tokens << " tokens, each put alone in its own micro-batch\n";
    while (static_cast<int64_t>(groups.size()) < spec.min_count) {
      auto largest = std::max_element(groups.begin(), groups.end(),
                                      [](const auto& a, const auto& b) { return a.size() < b.size(); });
      if (largest->size() < 2) break;
      std::vector<int64_t> second(largest->begin() + static_cast<int64_t>(largest->size() / 2), largest->end());
      largest->resize(largest->size() / 2);
      groups.insert(largest + 1, std::move(second));
    }
  } else {
    TORCH_CHECK(spec.size >= 1, "micro-batch size must be >= 1");
    for (int64_t begin = 0; begin < batch.size(); begin += spec.size) {
      groups.emplace_back(static_cast<size_t>(std::min(spec.size, batch.size() - begin)));
      std::iota(groups.back().begin(), groups.back().end(), begin);
    }
  }
  std::vector<MicroBatch> out;
  for (const auto& g : groups) {
    torch::Tensor rows = torch::tensor(g, torch::kInt64);
    if (spec.max_tokens > 0) {
      out.push_back({trim_padding(batch.select(rows)), rows});
    } else {  // consecutive rows: a view, no copy
      out.push_back({batch.slice(g.front(), g.front() + static_cast<int64_t>(g.size())), rows});
    }
  }
  return out;
}

torch::Tensor gather_micro_results(const std::vector<MicroBatch>& micros, const std::vector<torch::Tensor>& parts,
                                   int64_t B, int64_t R) {
  TORCH_CHECK(micros.size() == parts.size(), "gather_micro_results: one result per micro-batch");
  std::vector<int64_t> shape = {B, R};
  if (!parts.empty()) shape.insert(shape.end(), parts[0].sizes().begin() + 2, parts[0].sizes().end());
  torch::Tensor out = torch::zeros(shape, parts.empty() ? torch::TensorOptions() : parts[0].options());
  for (size_t i = 0; i < micros.size(); ++i) {
    const torch::Tensor& part = parts[i];
    std::vector<int64_t> pad(2 * (part.dim() - 2), 0);  // constant_pad_nd's pairs run from the last dimension
    pad.insert(pad.end(), {0, R - part.size(1)});
    out.index_copy_(0, micros[i].rows.to(out.device()), torch::constant_pad_nd(part, pad));
  }
  return out;
}

}  // namespace ppo
