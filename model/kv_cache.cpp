#include "model/kv_cache.h"

#include <algorithm>

namespace ppo {

void KVCache::allocate_static(const KVCache& like, int64_t rows, int64_t capacity) {
  clear();
  const auto zeros = [&](const torch::Tensor& t) {
    return torch::zeros({rows, t.size(1), capacity, t.size(3)}, t.options());
  };
  for (size_t i = 0; i < like.keys.size(); ++i) {
    keys.push_back(zeros(like.keys[i]));
    values.push_back(zeros(like.values[i]));
  }
  lengths.assign(like.keys.size(), 0);
  write_at = torch::zeros({1}, like.keys.at(0).options().dtype(torch::kLong));
}

KVCache::Entry KVCache::write_step(int64_t layer, const torch::Tensor& key, const torch::Tensor& value) {
  const int64_t B = key.size(0);
  torch::Tensor k = keys[layer].narrow(0, 0, B), v = values[layer].narrow(0, 0, B);
  k.index_copy_(2, write_at, key);
  v.index_copy_(2, write_at, value);
  return {k, v};
}

void KVCache::advance(int64_t count) {
  for (auto& l : lengths) l += count;
  TORCH_CHECK(length() <= capacity(), "KVCache::advance: ", length(), " positions in a cache of ", capacity());
}

KVCache::Entry KVCache::append(int64_t layer, const torch::Tensor& key, const torch::Tensor& value) {
  if (static_cast<int64_t>(keys.size()) <= layer) {
    keys.resize(layer + 1);
    values.resize(layer + 1);
    lengths.resize(layer + 1, 0);
  }
  const int64_t old_length = lengths[layer], new_length = old_length + key.size(2);
  torch::Tensor& k = keys[layer];
  torch::Tensor& v = values[layer];
  if (torch::GradMode::is_enabled()) {  // differentiable path: plain concatenation, capacity == length
    k = old_length == 0 ? key : torch::cat({k.narrow(2, 0, old_length), key}, 2);
    v = old_length == 0 ? value : torch::cat({v.narrow(2, 0, old_length), value}, 2);
  } else {
    if (!k.defined() || k.size(2) < new_length) {  // grow by doubling, keep the valid prefix
      const int64_t capacity = std::max({new_length, capacity_hint, k.defined() ? 2 * k.size(2) : int64_t{0}});
      auto grown_k = torch::empty({key.size(0), key.size(1), capacity, key.size(3)}, key.options());
      auto grown_v = torch::empty({value.size(0), value.size(1), capacity, value.size(3)}, value.options());
      if (old_length > 0) {
        grown_k.narrow(2, 0, old_length).copy_(k.narrow(2, 0, old_length));
        grown_v.narrow(2, 0, old_length).copy_(v.narrow(2, 0, old_length));
      }
      k = grown_k;
      v = grown_v;
    }
    k.narrow(2, old_length, key.size(2)).copy_(key);
    v.narrow(2, old_length, value.size(2)).copy_(value);
  }
  lengths[layer] = new_length;
  return {k.narrow(2, 0, new_length), v.narrow(2, 0, new_length)};
}

void KVCache::trim(int64_t length) {
  for (auto& l : lengths) l = std::min(l, length);
}

void KVCache::select(const torch::Tensor& rows) {
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!keys[i].defined()) continue;
    for (torch::Tensor* t : {&keys[i], &values[i]}) {
      if (write_at.defined())
        t->narrow(0, 0, rows.size(0)).copy_(t->index_select(0, rows));
      else
        *t = t->index_select(0, rows);
    }
  }
}

void KVCache::drop_front(int64_t count) {
  if (count <= 0) return;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!keys[i].defined()) continue;
    const int64_t kept = lengths[i] - count;
    TORCH_CHECK(kept >= 0, "KVCache::drop_front: ", count, " positions of ", lengths[i]);
    for (torch::Tensor* t : {&keys[i], &values[i]})
      if (kept > 0) t->narrow(2, 0, kept).copy_(t->narrow(2, count, kept).clone());
    lengths[i] = kept;
  }
}

void KVCache::write_rows(const torch::Tensor& rows, const KVCache& source, int64_t at) {
  const int64_t n = source.length();
  TORCH_CHECK(source.keys.size() == keys.size() && at >= 0 && at + n <= length(),
              "KVCache::write_rows: the source does not fit at position ", at);
  for (size_t i = 0; i < keys.size(); ++i) {
    keys[i].narrow(2, at, n).index_copy_(0, rows, source.keys[i].narrow(2, 0, n));
    values[i].narrow(2, at, n).index_copy_(0, rows, source.values[i].narrow(2, 0, n));
  }
}

void KVCache::clear() {
  keys.clear();
  values.clear();
  lengths.clear();
  write_at = torch::Tensor();
}

}  // namespace ppo
