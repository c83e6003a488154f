#include "common/batch.h"

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
  if (has("responses") && has("response_mask"))
    TORCH_CHECK(at("responses").sizes() == at("response_mask").sizes(), "responses and response_mask differ in shape");
  if (has("input_ids") && has("attention_mask"))
    TORCH_CHECK(at("input_ids").sizes() == at("attention_mask").sizes(), "input_ids and attention_mask differ");
}

}  // namespace ppo
