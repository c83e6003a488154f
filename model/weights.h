// A module's parameters in and out of files: ppo.cpp checkpoints (LibTorch archives) and a model's initial weights.
#pragma once

#include <torch/torch.h>

#include <string>

namespace ppo {

// Writes `archive` to `path` with every write checked (common/files.h): a full disk is an IoError naming the file,
// never LibTorch's std::terminate from a destructor.
void save_archive(torch::serialize::OutputArchive& archive, const std::string& path);
void save_module(const torch::nn::Module& module, const std::string& path);
// Loads a module's parameters from `path`, turning any failure into a UsageError that names the file: a file the
// checkpoint's manifest says is damaged, an archive that does not read, a tensor missing or of another shape than
// this config's model has.
void load_module(torch::nn::Module& module, const std::string& path);

// The weights a model starts from: the archive `checkpoint_file` when it is set (actor/critic.init_checkpoint),
// else the Hugging Face folder `hf_dir` when set (model.path; a value model may lack its value head there), else
// the seeded initialisation it already has.
void load_initial_weights(torch::nn::Module& module, const std::string& checkpoint_file, const std::string& hf_dir,
                          bool is_value_model);

}  // namespace ppo
