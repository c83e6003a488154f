#include "workers/critic.h"

namespace ppo {

Critic::Critic(const Config& config, int64_t vocab_size, int64_t total_optimizer_steps, torch::Device device)
    : config_(config),
      build_(sharded_build(config.model, config.parallel.zero_stage, config.critic.lora, config.critic.init_checkpoint,
                           /*is_value_model=*/true)),
      model_(initial_model<ValueModel>(config.model, vocab_size, config.critic.init_checkpoint, "critic",
                                       /*is_value_model=*/true, config.critic.lora, /*lora_path=*/"", &lora_record_,
                                       build_.get())),
      state_(*model_, *model_->model, device, config.critic.offload, &config.critic.optim, config.critic.grad_clip,
             total_optimizer_steps, config.parallel.zero_stage, std::move(build_)),
      loss_agg_mode_(parse_loss_agg_mode(config.critic.loss_agg_mode, "critic.loss_agg_mode")) {
  state_.set_lora_record(lora_record_);
}

MicroBatchSpec critic_micro_spec(const Config& config) {
  const CriticConfig& c = config.critic;
  const int64_t micro = config.derived.critic_micro_batch_size > 0 ? config.derived.critic_micro_batch_size
                                                                   : c.ppo_micro_batch_size_per_gpu;
  MicroBatchSpec spec{micro, c.use_dynamic_bsz ? c.ppo_max_token_len_per_gpu : 0, "critic.ppo_max_token_len_per_gpu"};
  spec.packed = c.use_remove_padding;
  return spec;
}

torch::Tensor Critic::response_values(const Batch& micro, const PackedSequences* packed) {
  if (packed) {  // the value head on the M positions before a real response token only
    auto hidden = model_->model->forward_packed(packed->input_ids, packed->position_ids, packed->lengths);
    return unpack_responses(*packed, model_->values_from_hidden(hidden[0].index_select(0, packed->predictors)));
  }
  const torch::Tensor& responses = micro.at(field::responses);
  const int64_t R = responses.size(1), T = micro.at(field::input_ids).size(1);
  torch::Tensor values =
      model_->forward(micro.at(field::input_ids), micro.at(field::position_ids), micro.at(field::attention_mask));
  // veRL: values[:, -R - 1 : -1], the state before each response token.
  return values.slice(1, T - R - 1, T - 1) * micro.at(field::response_mask);
}

torch::Tensor Critic::compute_values(const Batch& batch) {
  torch::NoGradGuard no_grad;
  WorkerState::Phase phase(state_, /*whole_model=*/false);
  model_->eval();
  const MicroBatchSpec spec = critic_micro_spec(config_);
  std::vector<MicroBatch> micros = rank_micro_batches(batch, spec, state_.zero_stage() == 3, Context::get());
  std::vector<torch::Tensor> parts;
  for (const MicroBatch& piece : micros) {
    if (spec.packed) {
      const PackedSequences packed = pack_sequences(piece.batch).to(state_.device());
      parts.push_back(response_values(piece.batch, &packed).cpu());
    } else {
      parts.push_back(response_values(piece.batch.to(state_.device()), nullptr).cpu());
    }
  }
  return gather_micro_results(micros, parts, batch.size(), batch.at(field::responses).size(1));
}

void Critic::update(const Batch& batch, int64_t mini_batches, Context& context, Metrics& metrics) {
  const CriticConfig& c = config_.critic;
  WorkerState::Phase phase(state_, /*whole_model=*/false);
  model_->train();
  state_.seed_dropout(config_.trainer.seed + 1);  // masks of their own, not the actor's
  UpdateSchedule schedule;
  schedule.epochs = c.ppo_epochs;
  schedule.mini_batches = mini_batches;
  schedule.micro = critic_micro_spec(config_);
  schedule.metric_prefix = "critic";
  schedule.device = state_.device();
  schedule.same_micro_count = state_.zero_stage() >= 2;
  const double norm_length = static_cast<double>(config_.data.max_response_length);
  const bool is_root = context.is_root();
  run_updates(batch, schedule, optimizer(), context, metrics,
              [&](const Batch& micro, const PackedSequences* packed, const Denominators& d, DeviceMeans& m) {
                const torch::Tensor& mask = micro.at(field::response_mask);
                torch::Tensor vpreds = response_values(micro, packed);
                const double denominator = agg_denominator(loss_agg_mode_, d.tokens, d.sequences);
                ValueLoss vl = value_loss(vpreds, micro.at(field::returns), micro.at(field::values), mask,
                                          c.cliprange_value, loss_agg_mode_, denominator, norm_length);
                const torch::Tensor tokens = mask.sum();
                m.add("critic/vf_loss", vl.loss, is_root && d.first_micro ? 1 : 0);
                m.add("critic/vf_clipfrac", vl.clipfrac.detach() * tokens, tokens);
                m.add("critic/vpred_mean", (vpreds.detach() * mask).sum(), tokens);
                return vl.loss;
              });
}

void Critic::save(const std::string& dir) const {
  state_.save(*model_, dir, "critic");
}

void Critic::load(const std::string& dir, bool with_optimizer) {
  state_.load(*model_, dir, "critic", with_optimizer);
}

}  // namespace ppo
