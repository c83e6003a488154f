#include "workers/critic.h"

#include "model/hf.h"

namespace ppo {

ModelConfig critic_model_config(const Config& config, int64_t vocab_size) {
  const std::string& path = config.critic.model.path;
  if (path.empty()) return config.model;
  const HfModelInfo info = read_hf_config(path, config.model);
  check_same_shape(config.model, info.config, "critic.model.path " + path, "its config.json has");
  usage_check(info.config.vocab_size == vocab_size,
              "critic.model.path " + path + ": its vocab_size is " + std::to_string(info.config.vocab_size) +
                  " but the policy's is " + std::to_string(vocab_size) + "; the critic reads the policy's tokens");
  ModelConfig c = info.config;  // its own rotary base, norm epsilon and token ids
  c.path = path;
  return c;
}

Critic::Critic(const Config& config, int64_t vocab_size, int64_t total_optimizer_steps, torch::Device device,
               int64_t micro_batch_size)
    : config_(config),
      micro_batch_size_(micro_batch_size),
      model_config_(critic_model_config(config, vocab_size)),
      build_(sharded_build(model_config_, config.parallel.zero_stage, config.critic.lora, config.critic.init_checkpoint,
                           /*is_value_model=*/true)),
      model_(initial_model<ValueModel>(model_config_, vocab_size, config.critic.init_checkpoint, "critic",
                                       /*is_value_model=*/true, config.critic.lora, /*lora_path=*/"", &lora_record_,
                                       build_.get())),
      state_(*model_, *model_->model, device, config.critic.offload, &config.critic.optim, config.critic.grad_clip,
             total_optimizer_steps, config.parallel.zero_stage, std::move(build_)),
      loss_agg_mode_(parse_loss_agg_mode(config.critic.loss_agg_mode, "critic.loss_agg_mode")) {
  state_.set_lora_record(lora_record_);
}

MicroBatchSpec critic_micro_spec(const Config& config, int64_t micro_batch_size) {
  const CriticConfig& c = config.critic;
  MicroBatchSpec spec{micro_batch_size > 0 ? micro_batch_size : c.ppo_micro_batch_size_per_gpu,
                      c.use_dynamic_bsz ? c.ppo_max_token_len_per_gpu : 0, "critic.ppo_max_token_len_per_gpu"};
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

torch::Tensor Critic::last_token_scores(const Batch& micro, const PackedSequences* packed) {
  if (packed) {  // the score head on each sequence's last packed token only
    auto hidden = model_->model->forward_packed(packed->input_ids, packed->position_ids, packed->lengths);
    std::vector<int64_t> last;
    int64_t end = 0;
    for (int64_t length : packed->lengths) last.push_back((end += length) - 1);
    const torch::Tensor rows = torch::tensor(last, torch::kInt64).to(hidden.device());
    return model_->scores_from_hidden(hidden[0].index_select(0, rows));
  }
  const int64_t T = micro.at(field::input_ids).size(1), R = micro.at(field::responses).size(1);
  torch::Tensor hidden = model_->model->forward(micro.at(field::input_ids), micro.at(field::position_ids),
                                                micro.at(field::attention_mask));
  // The response is right-padded after T - R prompt columns: its last real token is at T - R + length - 1.
  const torch::Tensor last = micro.at(field::response_mask).sum(1).to(torch::kInt64) + (T - R - 1);
  const torch::Tensor rows = torch::arange(hidden.size(0), last.options());
  return model_->scores_from_hidden(hidden.index({rows, last}));
}

std::vector<torch::Tensor> Critic::forward_micro_batches(const Batch& batch, std::vector<MicroBatch>& micros,
                                                         const MicroForward& forward) {
  torch::NoGradGuard no_grad;
  WorkerState::Phase phase(state_, /*whole_model=*/false);
  model_->eval();
  const MicroBatchSpec spec = critic_micro_spec(config_, micro_batch_size_);
  micros = rank_micro_batches(batch, spec, state_.zero_stage() == 3, Context::get());
  std::vector<torch::Tensor> parts;
  for (const MicroBatch& piece : micros) {
    if (spec.packed) {
      const PackedSequences packed = pack_sequences(piece.batch).to(state_.device());
      parts.push_back(forward(piece.batch, &packed).cpu());
    } else {
      parts.push_back(forward(piece.batch.to(state_.device()), nullptr).cpu());
    }
  }
  return parts;
}

torch::Tensor Critic::compute_values(const Batch& batch) {
  std::vector<MicroBatch> micros;
  const std::vector<torch::Tensor> parts = forward_micro_batches(
      batch, micros, [&](const Batch& micro, const PackedSequences* packed) { return response_values(micro, packed); });
  return gather_micro_results(micros, parts, batch.size(), batch.at(field::responses).size(1));
}

torch::Tensor Critic::compute_scores(const Batch& batch) {
  std::vector<MicroBatch> micros;
  const std::vector<torch::Tensor> parts = forward_micro_batches(
      batch, micros,
      [&](const Batch& micro, const PackedSequences* packed) { return last_token_scores(micro, packed); });
  torch::Tensor scores = torch::zeros({batch.size()});
  for (size_t i = 0; i < micros.size(); ++i) scores.index_copy_(0, micros[i].rows, parts[i]);
  return scores;
}

UpdateSchedule Critic::update_schedule(int64_t mini_batches, const std::string& metric_prefix) {
  UpdateSchedule schedule;
  schedule.epochs = config_.critic.ppo_epochs;
  schedule.mini_batches = mini_batches;
  schedule.micro = critic_micro_spec(config_, micro_batch_size_);
  schedule.metric_prefix = metric_prefix;
  schedule.device = state_.device();
  schedule.same_micro_count = state_.zero_stage() >= 2;
  return schedule;
}

void Critic::update(const Batch& batch, int64_t mini_batches, Context& context, Metrics& metrics) {
  const CriticConfig& c = config_.critic;
  WorkerState::Phase phase(state_, /*whole_model=*/false);
  model_->train();
  state_.seed_dropout(config_.trainer.seed + 1);  // masks of their own, not the actor's
  const double norm_length = static_cast<double>(config_.data.max_response_length);
  const bool is_root = context.is_root();
  run_updates(batch, update_schedule(mini_batches, "critic"), optimizer(), context, metrics,
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

void Critic::update_pairs(const Batch& batch, int64_t mini_batches, Context& context, Metrics& metrics) {
  const double center = config_.critic.center_rewards_coefficient;
  WorkerState::Phase phase(state_, /*whole_model=*/false);
  model_->train();
  state_.seed_dropout(config_.trainer.seed + 1);
  run_updates(batch, update_schedule(mini_batches, "rm"), optimizer(), context, metrics,
              [&](const Batch& micro, const PackedSequences* packed, const Denominators& d, DeviceMeans& m) {
                const torch::Tensor scores = last_token_scores(micro, packed).view({-1, 2});
                const torch::Tensor chosen = scores.select(1, 0), rejected = scores.select(1, 1);
                const torch::Tensor pairs = micro.at(field::sample_mask).view({-1, 2}).select(1, 0);
                const torch::Tensor margin = micro.at(field::margins).view({-1, 2}).select(1, 0);
                const torch::Tensor diff = chosen - rejected;
                torch::Tensor loss = -torch::log_sigmoid(diff - margin);
                if (center > 0) loss = loss + center * (chosen + rejected).pow(2);  // TRL's centring term
                const torch::Tensor count = pairs.sum();
                m.add("rm/loss", (loss.detach() * pairs).sum(), count);
                m.add("rm/accuracy", (diff.detach().gt(0).to(torch::kFloat) * pairs).sum(), count);
                m.add("rm/margin", (diff.detach() * pairs).sum(), count);
                m.add("rm/chosen_score", (chosen.detach() * pairs).sum(), count);
                m.add("rm/rejected_score", (rejected.detach() * pairs).sum(), count);
                return (loss * pairs).sum() / (d.sequences / 2);  // d.sequences: both rows of every real pair
              });
}

void Critic::save(const std::string& dir) const {
  state_.save(*model_, dir, "critic");
}

void Critic::load(const std::string& dir, bool with_optimizer) {
  state_.load(*model_, dir, "critic", with_optimizer);
}

}  // namespace ppo
