// The model's linear layers and LoRA's adapter on one (the module; model/lora.h adds adapters to a model and reads
// and writes PEFT's adapter files).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>

namespace ppo {

// A torch::nn::Linear of `in` -> `out` features, with or without a bias.
torch::nn::Linear make_linear(int64_t in, int64_t out, bool bias);

// A LoRA adapter on one linear layer (Hu et al. 2021; PEFT's LoraLayer): x -> scaling B(A(dropout(x))), scaling
// alpha / rank (rsLoRA: alpha / sqrt(rank), lora_scaling in model/lora.h), lora_A [rank, in], lora_B [out, rank], no
// biases; dropout only in training mode. model/lora.h adds them to a model and reads and writes them.
struct LoraAdapterImpl : torch::nn::Module {
  LoraAdapterImpl(int64_t in, int64_t out, int64_t rank, double scaling, double dropout);
  torch::Tensor forward(const torch::Tensor& x);  // [..., in] -> [..., out], the update only
  torch::Tensor delta_weight() const;             // [out, in]: scaling B A, what merging adds to W
  torch::nn::Linear lora_A{nullptr}, lora_B{nullptr};
  double scaling;
  double dropout;
  std::shared_ptr<bool> enabled;  // shared by a model's adapters: off computes the base model
};
TORCH_MODULE(LoraAdapter);

// linear(x), plus the adapter's update when there is one and adapters are on.
torch::Tensor adapted(torch::nn::Linear& linear, LoraAdapter& adapter, const torch::Tensor& x);

}  // namespace ppo
