// See model/weights.h.
#include "model/weights.h"

#include <filesystem>

#include "common/error.h"
#include "common/files.h"
#include "common/manifest.h"
#include "common/strings.h"
#include "model/hf.h"

namespace ppo {

void save_archive(torch::serialize::OutputArchive& archive, const std::string& path) {
  CheckedFile out(path, "w");
  std::exception_ptr failure;
  archive.save_to([&](const void* data, size_t bytes) -> size_t {
    if (!failure) try {
        out.write(data, bytes);
      } catch (const IoError&) {
        failure = std::current_exception();
      }
    return bytes;  // a short count makes LibTorch throw later, from a destructor (std::terminate): report it below
  });
  if (failure) std::rethrow_exception(failure);
  out.close();
}

void save_module(const torch::nn::Module& module, const std::string& path) {
  torch::serialize::OutputArchive archive;
  module.save(archive);
  save_archive(archive, path);
}

namespace {

constexpr const char* kAnotherModel =
    ": the checkpoint is of another model shape (model.* keys, or the config.json of model.path)";

// load_module of a .safetensors file: every tensor checked before any is copied.
void load_module_safetensors(torch::nn::Module& module, const std::string& path) {
  const SafetensorsReader reader = SafetensorsReader::file(path);
  const auto params = module.named_parameters();
  for (const auto& p : params) check_checkpoint_tensor(reader, path, p.key(), p.value().sizes());
  for (const std::string& name : reader.names())
    usage_check(params.contains(name), path + ": tensor '" + name + "' is not a parameter of this model (" +
                                           "a checkpoint of another model, or of LoRA adapters)");
  torch::NoGradGuard no_grad;
  for (const auto& p : params) p.value().copy_(reader.read_whole(p.key()));  // converts dtype and device
}

}  // namespace

void check_checkpoint_tensor(const SafetensorsReader& reader, const std::string& path, const std::string& name,
                             at::IntArrayRef expected) {
  const SafetensorsEntry* entry = reader.find(name);
  usage_check(entry != nullptr, path + ": no tensor '" + name + "': not a checkpoint of this model");
  check_stored_tensor(path, name, entry->shape, SafetensorsReader::dtype(*entry), expected, kAnotherModel);
}

std::string weights_file(const std::string& dir, const std::string& name) {
  const std::string sliced = dir + "/" + name + ".safetensors";
  return std::filesystem::exists(sliced) ? sliced : dir + "/" + name + ".pt";
}

void load_module(torch::nn::Module& module, const std::string& path) {
  if (!std::filesystem::exists(path)) throw UsageError("checkpoint file not found: " + path);
  check_regular_file(path);
  verify_manifest_entry(path);
  if (ends_with(path, ".safetensors")) return load_module_safetensors(module, path);
  // Module::load replaces each tensor with the archive's, whatever its shape: check the shapes after.
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
  for (const auto& p : module.named_parameters()) expected.emplace_back(p.key(), p.value().sizes().vec());
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    module.load(archive);
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    throw UsageError(path + ": not a checkpoint of this model (" + what.substr(0, what.find('\n')) + ")");
  }
  const auto loaded = module.named_parameters();
  for (const auto& [name, sizes] : expected)
    usage_check(loaded[name].sizes().vec() == sizes,
                another_shape(path, name, loaded[name].sizes(), sizes, kAnotherModel));
}

void load_initial_weights(torch::nn::Module& module, const std::string& checkpoint_file, const std::string& hf_dir,
                          bool is_value_model) {
  if (!checkpoint_file.empty()) return load_module(module, checkpoint_file);
  if (!hf_dir.empty()) load_hf_weights(module, hf_dir, /*allow_missing_value_head=*/is_value_model);
}

}  // namespace ppo
