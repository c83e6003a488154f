// A module's parameters in and out of files: ppo.cpp checkpoints (LibTorch archives) and a model's initial weights.
#pragma once

#include <torch/torch.h>

#include <string>

#include "model/safetensors.h"

namespace ppo {

// Writes `archive` to `path` with every write checked (common/files.h): a full disk is an IoError naming the file,
// never LibTorch's std::terminate from a destructor.
void save_archive(torch::serialize::OutputArchive& archive, const std::string& path);
void save_module(const torch::nn::Module& module, const std::string& path);
// Loads a module's parameters from `path` (a LibTorch archive, or a .safetensors file of the module's parameter
// names), turning any failure into a UsageError that names the file: a file the checkpoint's manifest says is
// damaged, an archive that does not read, a tensor missing or of another shape than this config's model has.
void load_module(torch::nn::Module& module, const std::string& path);

// The weights of `name` (actor, critic) in the checkpoint folder `dir`: <name>.safetensors, which ZeRO-3 runs write a
// unit at a time and read a slice at a time, when it is there, else <name>.pt.
std::string weights_file(const std::string& dir, const std::string& name);

// A UsageError naming `path` and the tensor unless `reader` holds tensor `name` of shape `expected` (the messages of
// load_module).
void check_checkpoint_tensor(const SafetensorsReader& reader, const std::string& path, const std::string& name,
                             at::IntArrayRef expected);

// The weights a model starts from: the archive `checkpoint_file` when it is set (actor/critic.init_checkpoint),
// else the Hugging Face folder `hf_dir` when set (model.path; a value model may lack its value head there), else
// the seeded initialisation it already has.
void load_initial_weights(torch::nn::Module& module, const std::string& checkpoint_file, const std::string& hf_dir,
                          bool is_value_model);

}  // namespace ppo
