// safetensors weight files (https://huggingface.co/docs/safetensors, format from huggingface/safetensors README):
//   8 bytes  N, the header length (unsigned little-endian)
//   N bytes  JSON header {name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}}
//   rest     the data area; offsets count from its first byte
// Every header is checked before any of its numbers is trusted; violations throw UsageError("<file>: <problem>").
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace ppo {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;            // "F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL"
  std::vector<int64_t> shape;   // [] for a scalar
  uint64_t begin = 0, end = 0;  // byte range within the data area
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in header order (JSON object order: sorted by name)
  nlohmann::json metadata;                // "__metadata__" (an object of strings), or null when absent
  uint64_t data_start = 0;                // 8 + N: file offset of the data area
};

// Checks, in this order: the 8-byte length is there and N fits in the file (and is at most 100 MB, as the reference
// implementation limits it); the header is a JSON object nested at most 64 deep; every tensor has a known dtype, a
// shape of non-negative integers and data_offsets [begin, end] with begin <= end <= data area size and
// end - begin == numel * dtype size; no two tensors overlap. `origin` (a file name) starts every error message.
SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const std::string& origin);

// CPU tensors in their stored dtype. Reads the header, then each tensor straight into its storage. `metadata`, when
// given, receives the header's "__metadata__" (null when absent).
std::map<std::string, torch::Tensor> load_safetensors(const std::string& path, nlohmann::json* metadata = nullptr);

// Contiguous CPU copies, names sorted, header padded with spaces to a multiple of 8 bytes. `metadata`, when not
// null/empty, must be an object of strings. Written to "<path>.tmp" and renamed, so a crash leaves no partial file.
void save_safetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                      const nlohmann::json& metadata = {});

// A Hugging Face model folder: model.safetensors.index.json ({"weight_map": {name: shard file}}) when present, else
// model.safetensors. Every name of the weight map must be found in the shard it names.
std::map<std::string, torch::Tensor> load_safetensors_dir(const std::string& dir);
// The files load_safetensors_dir reads, by name within `dir`: the index and its shards, or model.safetensors.
std::vector<std::string> safetensors_dir_files(const std::string& dir);

// Writes dir/model.safetensors when all tensors fit in max_shard_bytes, else model-00001-of-0000N.safetensors ...
// (names in sorted order, a new shard when the next tensor would overflow; a tensor larger than the limit gets its
// own shard, as transformers' shard_checkpoint does) plus model.safetensors.index.json with metadata.total_size.
void save_safetensors_sharded(const std::string& dir, const std::map<std::string, torch::Tensor>& tensors,
                              uint64_t max_shard_bytes);

}  // namespace ppo
