// The key/value cache of incremental decoding: growing for prefills, static (fixed capacity and addresses) for the
// decode engine's step (decode/step.h), and the projections that stand in for the layers' own in a generation's
// prefills.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace ppo {

// The decoder layers' projections as something else computes them, for no-grad forwards over a cache: the decode
// engine's fused weights (decode/fused_weights.h: q, k and v as one matmul, gate and up as one, LoRA's updates
// merged) stand in for the modules' own in a generation's prefills, so that prefill and decode step share them.
struct LayerProjections {
  enum Kind { qkv, o, gate_up, down };
  virtual ~LayerProjections() = default;
  // x [..., in] -> [..., out] for decoder layer `layer`: qkv D -> (H + 2 H_kv) Dh as [q; k; v] (with the attention
  // biases), o H Dh -> D, gate_up D -> 2 I as [gate; up] and down I -> D (a dense layer's MLP).
  virtual torch::Tensor project(int64_t layer, Kind kind, const torch::Tensor& x) const = 0;
};

// Key/value cache of every layer for incremental decoding. Rows are sequences; all rows share one length
// (left padding keeps them aligned; the attention mask says which cached positions are real).
// Without autograd, storage grows by doubling and new entries are written in place; with autograd enabled the
// cache concatenates instead, so that it stays differentiable.
// A static cache (allocate_static) has a fixed capacity and row count for its whole life: the decode step
// (decode/step.h) writes each layer's new key and value at the device-side position `write_at` and
// attends over the whole capacity, so that the step has the same shapes and addresses every time (a CUDA graph can
// replay it); the host keeps the length with advance().
struct KVCache {
  struct Entry {
    torch::Tensor key, value;  // [B, H_kv, T_cached, Dh]
  };
  std::vector<torch::Tensor> keys, values;  // per layer [B, H_kv, capacity, Dh]
  std::vector<int64_t> lengths;             // per layer, valid positions
  int64_t capacity_hint = 0;                // positions reserved on first use (e.g. prompt + new tokens)
  // When set (no-grad forwards only), the layers project with these instead of their modules.
  std::shared_ptr<const LayerProjections> projections;
  torch::Tensor write_at;  // static cache: [1] int64 on the device, the position a step writes

  int64_t length() const { return lengths.empty() ? 0 : lengths[0]; }  // cached positions (T_cached)
  int64_t batch_size() const { return keys.empty() || !keys[0].defined() ? 0 : keys[0].size(0); }
  int64_t capacity() const { return keys.empty() || !keys[0].defined() ? 0 : keys[0].size(2); }
  // Zeros for `rows` rows of `capacity` positions, each layer's keys and values shaped (heads, head dim) and typed as
  // `like`'s (a prefill's cache), length 0, write_at 0; `projections` are kept. Zeros: a position no row has written is
  // masked, and must hold a finite value for the masked scores to be exact.
  void allocate_static(const KVCache& like, int64_t rows, int64_t capacity);
  // Appends `key`, `value` [B, H_kv, T, Dh] to `layer`; returns that layer's whole cache [B, H_kv, T_cached, Dh].
  Entry append(int64_t layer, const torch::Tensor& key, const torch::Tensor& value);
  // Static cache: writes `key`, `value` [B, H_kv, 1, Dh] into the first B rows of `layer` at position write_at;
  // returns those rows over the whole capacity [B, H_kv, capacity, Dh].
  Entry write_step(int64_t layer, const torch::Tensor& key, const torch::Tensor& value);
  // Static cache, on the host: the steps since the last call wrote `count` positions.
  void advance(int64_t count);
  // Forgets every position at or beyond `length`.
  void trim(int64_t length);
  // Keeps only the rows `rows` ([B'] int64, on the cache's device), in that order. A static cache moves them to its
  // first B' rows in place (its storage stays).
  void select(const torch::Tensor& rows);
  // Forgets positions [0, count) of every row and moves the rest to the front (in place, capacity unchanged).
  void drop_front(int64_t count);
  // Copies every position of `source` (same layers, B' rows) into rows `rows` ([B'] int64) at positions
  // [at, at + source.length()); `at + source.length()` must not exceed this cache's length.
  void write_rows(const torch::Tensor& rows, const KVCache& source, int64_t at);
  void clear();
};

}  // namespace ppo
