// See model/weights.h.
#include "model/weights.h"

#include <filesystem>

#include "common/error.h"
#include "model/hf.h"

namespace ppo {

void save_module(const torch::nn::Module& module, const std::string& path) {
  torch::serialize::OutputArchive archive;
  module.save(archive);
  archive.save_to(path);
}

void load_module(torch::nn::Module& module, const std::string& path) {
  if (!std::filesystem::exists(path)) throw UsageError("checkpoint file not found: " + path);
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    module.load(archive);
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    throw UsageError(path + ": not a checkpoint of this model (" + what.substr(0, what.find('\n')) + ")");
  }
}

void load_initial_weights(torch::nn::Module& module, const std::string& checkpoint_file, const std::string& hf_dir,
                          bool is_value_model) {
  if (!checkpoint_file.empty()) return load_module(module, checkpoint_file);
  if (!hf_dir.empty()) load_hf_weights(module, hf_dir, /*allow_missing_value_head=*/is_value_model);
}

}  // namespace ppo
