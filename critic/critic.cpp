#include "critic/critic.h"

#include "actor/actor.h"
#include "model/hf.h"
#include "rl/algorithms.h"

namespace ppo {

Critic::Critic(const Config& config, int64_t vocab_size, int64_t total_optimizer_steps, torch::Device device)
    : config_(config), device_(device), model_(config.model, vocab_size) {
  if (!config.critic.init_checkpoint.empty()) load_module(*model_, config.critic.init_checkpoint + "/critic.pt");
  if (config.critic.init_checkpoint.empty() && !config.model.path.empty())
    load_hf_weights(*model_, config.model.path, /*allow_missing_value_head=*/true);
  placement_ = std::make_unique<ParamPlacement>(model_->parameters(), device_, config.critic.offload.param);
  optimizer_ = std::make_unique<Optimizer>(model_->parameters(), config.critic.optim, config.critic.grad_clip,
                                           total_optimizer_steps, config.critic.offload);
}

MicroBatchSpec critic_micro_spec(const Config& config) {
  const CriticConfig& c = config.critic;
  return {c.ppo_micro_batch_size_per_gpu, c.use_dynamic_bsz ? c.ppo_max_token_len_per_gpu : 0,
          "critic.ppo_max_token_len_per_gpu"};
}

torch::Tensor Critic::response_values(const Batch& micro) {
  const torch::Tensor& responses = micro.at("responses");
  const int64_t R = responses.size(1), T = micro.at("input_ids").size(1);
  torch::Tensor values = model_->forward(micro.at("input_ids"), micro.at("position_ids"), micro.at("attention_mask"));
  // veRL: values[:, -R - 1 : -1], the state before each response token.
  return values.slice(1, T - R - 1, T - 1) * micro.at("response_mask");
}

torch::Tensor Critic::compute_values(const Batch& batch) {
  torch::NoGradGuard no_grad;
  OnDevice on(*placement_);
  model_->eval();
  std::vector<MicroBatch> micros = make_micro_batches(batch, critic_micro_spec(config_));
  std::vector<torch::Tensor> parts;
  for (const MicroBatch& m : micros) parts.push_back(response_values(m.batch.to(device_)).cpu());
  return gather_micro_results(micros, parts, batch.size(), batch.at("responses").size(1));
}

void Critic::update(const Batch& batch, int64_t mini_batches, Context& context, Metrics& metrics) {
  const CriticConfig& c = config_.critic;
  OnDevice on(*placement_);
  model_->train();
  UpdateSchedule schedule;
  schedule.epochs = c.ppo_epochs;
  schedule.mini_batches = mini_batches;
  schedule.micro = critic_micro_spec(config_);
  schedule.metric_prefix = "critic";
  schedule.device = device_;
  const double norm_length = static_cast<double>(config_.data.max_response_length);
  const bool is_root = context.is_root();
  run_updates(batch, schedule, *optimizer_, context, metrics,
              [&](const Batch& micro, const Denominators& d, Metrics& m) {
                const torch::Tensor& mask = micro.at("response_mask");
                torch::Tensor vpreds = response_values(micro);
                double denominator = c.loss_agg_mode == "token-mean" ? d.tokens : d.sequences;
                ValueLoss vl = value_loss(vpreds, micro.at("returns"), micro.at("values"), mask, c.cliprange_value,
                                          c.loss_agg_mode, denominator, norm_length);
                const double tokens = mask.sum().item<double>();
                m.add_mean("critic/vf_loss", vl.loss.item<double>(), is_root && d.first_micro ? 1 : 0);
                m.add_mean("critic/vf_clipfrac", vl.clipfrac.item<double>() * tokens, tokens);
                m.add_mean("critic/vpred_mean", (vpreds.detach() * mask).sum().item<double>(), tokens);
                return vl.loss;
              });
}

void Critic::save(const std::string& dir) const {
  save_module(*model_, dir + "/critic.pt");
  optimizer_->save(dir + "/critic_optim.pt");
}

void Critic::load(const std::string& dir, bool with_optimizer) {
  load_module(*model_, dir + "/critic.pt");
  if (with_optimizer) optimizer_->load(dir + "/critic_optim.pt");
}

}  // namespace ppo
