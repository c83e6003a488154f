// safetensors weight files (https://huggingface.co/docs/safetensors, format from huggingface/safetensors README):
//   8 bytes  N, the header length (unsigned little-endian)
//   N bytes  JSON header {name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}}
//   rest     the data area; offsets count from its first byte
// Every header is checked before any of its numbers is trusted; violations throw UsageError("<file>: <problem>").
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace ppo {

class CheckedFile;  // common/files.h

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

// "[2, 3]": a shape as the error lines print it.
std::string shape_text(at::IntArrayRef shape);
// The error line of a stored tensor `name` of `where` (a file or folder) whose shape is not its parameter's:
// "<where>: tensor '<name>' has shape <found>, the model of this config <expected><why>".
std::string another_shape(const std::string& where, const std::string& name, at::IntArrayRef found,
                          at::IntArrayRef expected, const std::string& why);
// The check a stored tensor passes before it fills a parameter of shape `expected`: the same shape (else
// another_shape's error) and a floating-point dtype. Both are UsageErrors.
void check_stored_tensor(const std::string& where, const std::string& name, at::IntArrayRef found,
                         torch::ScalarType dtype, at::IntArrayRef expected, const std::string& why);

// The tensors of a safetensors file, or of a Hugging Face folder (as load_safetensors_dir reads it), read by the
// byte range: opening reads and checks every header (and the folder's index), and `read` takes only the bytes of
// the elements it asks for (a ZeRO-3 rank reads its slices of each tensor so).
class SafetensorsReader {
 public:
  static SafetensorsReader file(const std::string& path);
  static SafetensorsReader folder(const std::string& dir);

  const SafetensorsEntry* find(const std::string& name) const;  // null when absent
  const std::vector<std::string>& names() const { return order_; }
  const nlohmann::json& metadata() const { return metadata_; }  // the (first) file's "__metadata__"
  static torch::ScalarType dtype(const SafetensorsEntry& entry);
  // Elements [first, first + count) of tensor `name` in row-major order: a 1-D CPU tensor of its stored dtype.
  // UsageError naming the file and the tensor when the bytes cannot be read (a file truncated since it opened).
  torch::Tensor read(const std::string& name, int64_t first, int64_t count) const;
  torch::Tensor read_whole(const std::string& name) const;  // in its shape
  std::map<std::string, torch::Tensor> read_all() const;

 private:
  struct Located {
    std::string path, shard;  // the file, and its name in the folder's index
    uint64_t data_start;
    SafetensorsEntry entry;
  };
  void add_file(const std::string& path, const std::string& shard);

  std::string origin_;  // the file, or the folder's index, for messages
  std::map<std::string, Located> tensors_;
  std::vector<std::string> order_;  // the headers' order
  nlohmann::json metadata_;
};

// A safetensors file written a tensor at a time: the tensors' names, dtypes and shapes are declared up front, in
// the order their bytes follow, and each add() appends the next one's, so that a ZeRO-3 save writes one gathered
// unit at a time. Written to "<path>.tmp" and renamed by finish(): a crash, or an exception before finish(), leaves
// no file at `path`. `metadata` as save_safetensors'.
class SafetensorsWriter {
 public:
  struct Spec {
    std::string name;
    torch::ScalarType dtype;
    std::vector<int64_t> shape;
  };
  SafetensorsWriter(const std::string& path, const std::vector<Spec>& specs, const nlohmann::json& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  void add(const torch::Tensor& tensor);  // the next declared tensor, of its dtype and shape
  void finish();

 private:
  std::string path_, tmp_;
  std::vector<Spec> specs_;
  size_t next_ = 0;
  std::unique_ptr<CheckedFile> out_;  // every write checked: a full disk is an IoError naming the file
  bool finished_ = false;
};

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
