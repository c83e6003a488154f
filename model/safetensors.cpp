// See model/safetensors.h. Checks follow the reference reader (huggingface/safetensors, safetensors/src/tensor.rs
// SafeTensors::read_metadata / validate). Tensor bytes are little-endian, as on every host LibTorch targets here.
#include "model/safetensors.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <set>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/strings.h"

namespace ppo {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's MAX_HEADER_SIZE
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kSingleFile = "model.safetensors";

struct DtypeInfo {
  const char* name;
  torch::ScalarType type;
  uint64_t bytes;
};
const DtypeInfo kDtypes[] = {
    {"F64", torch::kFloat64, 8},   {"F32", torch::kFloat32, 4}, {"F16", torch::kFloat16, 2},
    {"BF16", torch::kBFloat16, 2}, {"I64", torch::kInt64, 8},   {"I32", torch::kInt32, 4},
    {"I16", torch::kInt16, 2},     {"I8", torch::kInt8, 1},     {"U8", torch::kUInt8, 1},
    {"BOOL", torch::kBool, 1},
};

std::string supported_dtypes() {
  return join(kDtypes, ", ", [](const DtypeInfo& d) { return std::string(d.name); });
}

const DtypeInfo* dtype_by_name(const std::string& name) {
  for (const DtypeInfo& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

const DtypeInfo* dtype_by_type(torch::ScalarType type) {
  for (const DtypeInfo& d : kDtypes)
    if (type == d.type) return &d;
  return nullptr;
}

[[noreturn]] void fail(const std::string& origin, const std::string& problem) {
  throw UsageError(origin + ": " + problem);
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A JSON integer in [0, limit], else fails with `what`.
uint64_t non_negative(const json& v, uint64_t limit, const std::string& origin, const std::string& what,
                      const std::string& limit_name) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    fail(origin, what + " must be a non-negative integer, got " + v.dump());
  const uint64_t x = v.get<uint64_t>();
  if (x > limit)
    fail(origin, what + " = " + std::to_string(x) + " exceeds " + limit_name + " " + std::to_string(limit));
  return x;
}

SafetensorsEntry parse_entry(const std::string& name, const json& info, uint64_t data_size, const std::string& origin) {
  const std::string where = "tensor '" + name + "'";
  if (!info.is_object()) fail(origin, where + ": expected an object {dtype, shape, data_offsets}");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!info.contains(key)) fail(origin, where + " has no \"" + key + "\"");
  SafetensorsEntry e;
  e.name = name;
  if (!info["dtype"].is_string()) fail(origin, where + ": dtype must be a string");
  e.dtype = info["dtype"].get<std::string>();
  const DtypeInfo* dtype = dtype_by_name(e.dtype);
  if (!dtype) fail(origin, where + ": unsupported dtype \"" + e.dtype + "\"; supported: " + supported_dtypes());
  const json& shape = info["shape"];
  if (!shape.is_array()) fail(origin, where + ": shape must be an array");
  for (const json& d : shape)
    e.shape.push_back(static_cast<int64_t>(
        non_negative(d, std::numeric_limits<int64_t>::max(), origin, where + ": a shape entry", "int64 max")));
  // LibTorch refuses a shape whose sizes multiply past int64 even when one of them is 0 (numel overflow).
  uint64_t elements = 1;
  for (int64_t dim : e.shape) {
    if (dim == 0) continue;
    if (elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / static_cast<uint64_t>(dim))
      fail(origin, where + ": shape " + shape.dump() + " has more elements than int64 counts");
    elements *= static_cast<uint64_t>(dim);
  }
  // numel * dtype size, or "too big" once it exceeds the data area (checked before each product, so no overflow).
  uint64_t bytes = dtype->bytes;
  bool too_big = false;
  if (std::count(e.shape.begin(), e.shape.end(), 0) > 0) bytes = 0;
  for (int64_t dim : e.shape) {
    if (bytes == 0 || too_big) break;
    if (bytes > data_size / static_cast<uint64_t>(dim))
      too_big = true;
    else
      bytes *= static_cast<uint64_t>(dim);
  }
  const json& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) fail(origin, where + ": data_offsets must be [begin, end]");
  e.begin = non_negative(offsets[0], data_size, origin, where + ": data_offsets begin", "the data area size");
  e.end = non_negative(offsets[1], data_size, origin, where + ": data_offsets end", "the data area size");
  if (e.begin > e.end) fail(origin, where + ": data_offsets begin > end");
  if (too_big || e.end - e.begin != bytes)
    fail(origin, where + ": data_offsets span " + std::to_string(e.end - e.begin) + " bytes but " + e.dtype +
                     " with this shape needs " + (too_big ? "more than the data area" : std::to_string(bytes)));
  return e;
}

void check_no_overlap(std::vector<SafetensorsEntry> entries, const std::string& origin) {
  std::sort(entries.begin(), entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& e : entries) {
    if (e.begin == e.end) continue;  // an empty tensor occupies no bytes
    if (previous && e.begin < previous->end)
      fail(origin, "tensors '" + previous->name + "' and '" + e.name + "' overlap in the data area");
    previous = &e;
  }
}

// The header (N bytes at `text`) of a file of `file_size` bytes.
SafetensorsHeader parse_header_text(const char* text, uint64_t n, uint64_t file_size, const std::string& origin) {
  if (n == 0 || text[0] != '{') fail(origin, "the header does not start with '{'");
  json header;
  try {
    header = parse_json_bounded(std::string(text, text + n));
  } catch (const json::exception& e) {
    fail(origin, std::string("the header is not valid JSON: ") + e.what());
  } catch (const UsageError& e) {
    fail(origin, std::string("the header: ") + e.what());
  }
  if (!header.is_object()) fail(origin, "the header is not a JSON object");
  SafetensorsHeader result;
  result.data_start = 8 + n;
  const uint64_t data_size = file_size - result.data_start;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) fail(origin, "__metadata__ must be an object of strings");
      for (const auto& [key, value] : info.items())
        if (!value.is_string()) fail(origin, "__metadata__[\"" + key + "\"] must be a string");
      result.metadata = info;
      continue;
    }
    result.entries.push_back(parse_entry(name, info, data_size, origin));
  }
  check_no_overlap(result.entries, origin);
  return result;
}

uint64_t header_length(const uint8_t* first8, uint64_t file_size, const std::string& origin) {
  const uint64_t n = read_u64_le(first8);
  if (n > file_size - 8)
    fail(origin, "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(file_size) +
                     " bytes)");
  if (n > kMaxHeaderBytes) fail(origin, "header length " + std::to_string(n) + " exceeds 100 MB");
  return n;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const std::string& origin) {
  if (size < 8) fail(origin, "file of " + std::to_string(size) + " bytes is shorter than the 8-byte header length");
  const uint64_t n = header_length(data, size, origin);
  return parse_header_text(reinterpret_cast<const char*>(data + 8), n, size, origin);
}

std::map<std::string, torch::Tensor> load_safetensors(const std::string& path, nlohmann::json* metadata) {
  const SafetensorsReader reader = SafetensorsReader::file(path);
  if (metadata) *metadata = reader.metadata();
  return reader.read_all();
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, const std::vector<Spec>& specs,
                                     const nlohmann::json& metadata)
    : path_(path), specs_(specs) {
  json header = json::object();
  uint64_t offset = 0;
  for (const Spec& spec : specs_) {
    if (spec.name == "__metadata__") fail(path, "'__metadata__' cannot name a tensor");
    const DtypeInfo* d = dtype_by_type(spec.dtype);
    if (!d)
      fail(path, "tensor '" + spec.name + "' has dtype " + std::string(c10::toString(spec.dtype)) +
                     ", which safetensors here cannot store; supported: " + supported_dtypes());
    uint64_t numel = 1;
    for (int64_t n : spec.shape) numel *= static_cast<uint64_t>(n);
    header[spec.name] = {
        {"dtype", d->name}, {"shape", spec.shape}, {"data_offsets", {offset, offset + numel * d->bytes}}};
    offset += numel * d->bytes;
  }
  if (!metadata.is_null() && !metadata.empty()) {
    if (!metadata.is_object()) fail(path, "metadata must be a JSON object of strings");
    for (const auto& [key, value] : metadata.items())
      if (!value.is_string()) fail(path, "metadata[\"" + key + "\"] must be a string");
    header["__metadata__"] = metadata;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data area starts 8-byte aligned
  tmp_ = make_temp_file(path);
  out_ = std::make_unique<CheckedFile>(tmp_, "w");
  uint8_t first8[8];
  for (int i = 0; i < 8; ++i) first8[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  out_->write(first8, 8);
  out_->write(text);
}

SafetensorsWriter::~SafetensorsWriter() {
  if (finished_) return;
  out_.reset();
  std::error_code ignored;
  fs::remove(tmp_, ignored);
}

void SafetensorsWriter::add(const torch::Tensor& tensor) {
  TORCH_CHECK(next_ < specs_.size(), "SafetensorsWriter: more tensors than declared for ", path_);
  const Spec& spec = specs_[next_++];
  const torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
  TORCH_CHECK(t.scalar_type() == spec.dtype && t.sizes().vec() == spec.shape, "SafetensorsWriter: tensor '", spec.name,
              "' is not of the declared dtype and shape");
  out_->write(t.data_ptr(), static_cast<size_t>(t.numel() * t.element_size()));
}

void SafetensorsWriter::finish() {
  TORCH_CHECK(next_ == specs_.size(), "SafetensorsWriter: ", specs_.size() - next_, " declared tensors not written to ",
              path_);
  out_->close();
  fs::rename(tmp_, path_);
  finished_ = true;
}

void save_safetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                      const nlohmann::json& metadata) {
  std::vector<SafetensorsWriter::Spec> specs;
  for (const auto& [name, tensor] : tensors) {  // std::map: sorted by name
    if (!tensor.defined()) fail(path, "tensor '" + name + "' is undefined");
    specs.push_back({name, tensor.scalar_type(), tensor.sizes().vec()});
  }
  SafetensorsWriter writer(path, specs, metadata);
  for (const auto& [name, tensor] : tensors) writer.add(tensor);
  writer.finish();
}

namespace {

// The shard files named by the index at `origin` (a JSON object with "weight_map": {tensor name: shard file}).
std::set<std::string> index_shards(const json& index, const std::string& origin) {
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    fail(origin, "expected an object with \"weight_map\": {tensor name: shard file}");
  std::set<std::string> shards;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) fail(origin, "weight_map[\"" + name + "\"] must be a file name");
    const fs::path shard(file.get<std::string>());
    if (shard.empty() || shard.is_absolute() || shard.has_parent_path())
      fail(origin, "weight_map[\"" + name + "\"] = " + file.dump() + " must be a file name inside the folder");
    shards.insert(shard.string());
  }
  return shards;
}

}  // namespace

std::vector<std::string> safetensors_dir_files(const std::string& dir) {
  const fs::path index_path = fs::path(dir) / kIndexFile;
  if (!fs::exists(index_path)) {
    if (fs::exists(fs::path(dir) / kSingleFile)) return {kSingleFile};
    throw UsageError(dir + ": holds neither " + kSingleFile + " nor " + kIndexFile);
  }
  std::vector<std::string> files = {kIndexFile};
  for (const std::string& shard : index_shards(read_json_file(index_path.string()), index_path.string()))
    files.push_back(shard);
  return files;
}

std::map<std::string, torch::Tensor> load_safetensors_dir(const std::string& dir) {
  return SafetensorsReader::folder(dir).read_all();
}

// ------------------------------------------------------------------------------------------- SafetensorsReader

SafetensorsReader SafetensorsReader::file(const std::string& path) {
  SafetensorsReader reader;
  reader.origin_ = path;
  reader.add_file(path, path);
  return reader;
}

void SafetensorsReader::add_file(const std::string& path, const std::string& shard) {
  check_regular_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(path + ": cannot open file");
  in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  uint8_t first8[8];
  if (file_size < 8 || !in.read(reinterpret_cast<char*>(first8), 8))
    fail(path, "file of " + std::to_string(file_size) + " bytes is shorter than the 8-byte header length");
  const uint64_t n = header_length(first8, file_size, path);
  std::string text(n, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(n))) fail(path, "cannot read the header");
  SafetensorsHeader header = parse_header_text(text.data(), n, file_size, path);
  if (metadata_.is_null()) metadata_ = header.metadata;
  for (SafetensorsEntry& e : header.entries) {
    const auto found = tensors_.find(e.name);
    if (found != tensors_.end())
      fail(origin_, "tensor '" + e.name + "' is in both " + found->second.shard + " and " + shard);
    const std::string name = e.name;
    order_.push_back(name);
    tensors_.emplace(name, Located{path, shard, header.data_start, std::move(e)});
  }
}

SafetensorsReader SafetensorsReader::folder(const std::string& dir) {
  const fs::path index_path = fs::path(dir) / kIndexFile;
  if (!fs::exists(index_path)) {
    if (fs::exists(fs::path(dir) / kSingleFile)) return file((fs::path(dir) / kSingleFile).string());
    throw UsageError(dir + ": holds neither " + kSingleFile + " nor " + kIndexFile);
  }
  SafetensorsReader reader;
  reader.origin_ = index_path.string();
  const json index = read_json_file(reader.origin_);
  for (const std::string& shard : index_shards(index, reader.origin_))
    reader.add_file((fs::path(dir) / shard).string(), shard);
  for (const auto& [name, file] : index["weight_map"].items()) {
    const auto found = reader.tensors_.find(name);
    if (found == reader.tensors_.end() || found->second.shard != file.get<std::string>())
      fail(reader.origin_, "weight_map puts '" + name + "' in " + file.get<std::string>() + ", which does not hold it");
  }
  return reader;
}

const SafetensorsEntry* SafetensorsReader::find(const std::string& name) const {
  const auto found = tensors_.find(name);
  return found == tensors_.end() ? nullptr : &found->second.entry;
}

torch::ScalarType SafetensorsReader::dtype(const SafetensorsEntry& entry) {
  return dtype_by_name(entry.dtype)->type;
}

torch::Tensor SafetensorsReader::read(const std::string& name, int64_t first, int64_t count) const {
  const Located& at = tensors_.at(name);
  const uint64_t size = dtype_by_name(at.entry.dtype)->bytes;
  const uint64_t numel = (at.entry.end - at.entry.begin) / size;
  TORCH_CHECK(first >= 0 && count >= 0 && static_cast<uint64_t>(first + count) <= numel,
              "SafetensorsReader::read: elements [", first, ", ", first + count, ") of '", name, "' are outside its ",
              numel);
  torch::Tensor t = torch::empty({count}, torch::TensorOptions().dtype(dtype(at.entry)));
  if (count == 0) return t;
  std::ifstream in(at.path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(at.data_start + at.entry.begin + static_cast<uint64_t>(first) * size));
  if (!in || !in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(count * size)))
    fail(at.path, "cannot read the bytes of tensor '" + name + "' (file truncated while reading?)");
  return t;
}

torch::Tensor SafetensorsReader::read_whole(const std::string& name) const {
  const SafetensorsEntry& e = tensors_.at(name).entry;
  int64_t numel = 1;
  for (int64_t d : e.shape) numel *= d;
  return read(name, 0, numel).view(e.shape);
}

std::map<std::string, torch::Tensor> SafetensorsReader::read_all() const {
  std::map<std::string, torch::Tensor> tensors;
  for (const std::string& name : order_) tensors.emplace(name, read_whole(name));
  return tensors;
}

void save_safetensors_sharded(const std::string& dir, const std::map<std::string, torch::Tensor>& tensors,
                              uint64_t max_shard_bytes) {
  if (max_shard_bytes == 0) throw UsageError(dir + ": max_shard_bytes must be positive");
  fs::create_directories(dir);
  std::vector<std::map<std::string, torch::Tensor>> shards(1);
  uint64_t shard_bytes = 0, total = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t bytes = t.defined() ? t.numel() * t.element_size() : 0;
    if (!shards.back().empty() && shard_bytes + bytes > max_shard_bytes) shards.emplace_back(), shard_bytes = 0;
    shards.back().emplace(name, t);
    shard_bytes += bytes;
    total += bytes;
  }
  const fs::path index_path = fs::path(dir) / kIndexFile;
  if (shards.size() == 1) {
    save_safetensors((fs::path(dir) / kSingleFile).string(), tensors);
    fs::remove(index_path);  // a stale index would take precedence when loading
    return;
  }
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    char file[64];
    std::snprintf(file, sizeof(file), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    save_safetensors((fs::path(dir) / file).string(), shards[i]);
    for (const auto& entry : shards[i]) weight_map[entry.first] = file;
  }
  const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_file_atomic(index_path.string(), index.dump(2) + "\n");
}

std::string shape_text(at::IntArrayRef shape) {
  return "[" + join(shape, ", ", [](int64_t size) { return std::to_string(size); }) + "]";
}

std::string another_shape(const std::string& where, const std::string& name, at::IntArrayRef found,
                          at::IntArrayRef expected, const std::string& why) {
  return where + ": tensor '" + name + "' has shape " + shape_text(found) + ", the model of this config " +
         shape_text(expected) + why;
}

void check_stored_tensor(const std::string& where, const std::string& name, at::IntArrayRef found,
                         torch::ScalarType dtype, at::IntArrayRef expected, const std::string& why) {
  usage_check(found == expected, another_shape(where, name, found, expected, why));
  usage_check(c10::isFloatingType(dtype),
              where + ": tensor '" + name + "' has dtype " + c10::toString(dtype) + ", expected a floating-point type");
}

}  // namespace ppo
