#include "workers/actor.h"

#include <filesystem>
#include <optional>

#include "common/error.h"
#include "rollout/rollout.h"

namespace ppo {

Actor::Actor(const Config& config, int64_t vocab_size, bool trainable, int64_t total_optimizer_steps,
             torch::Device device, int64_t zero_stage)
    : config_(config),
      build_(sharded_build(config.model, zero_stage, config.actor.lora, config.actor.init_checkpoint,
                           /*is_value_model=*/false)),
      model_(initial_model<CausalLM>(config.model, vocab_size, config.actor.init_checkpoint, "actor",
                                     /*is_value_model=*/false, config.actor.lora, config.model.lora_path, &lora_record_,
                                     build_.get())),
      state_(*model_, *model_->model, device, trainable ? config.actor.offload : config.ref.offload,
             trainable ? &config.actor.optim : nullptr, config.actor.grad_clip, total_optimizer_steps, zero_stage,
             std::move(build_)),
      loss_agg_mode_(parse_loss_agg_mode(config.actor.loss_agg_mode, "actor.loss_agg_mode")),
      policy_loss_(policy_loss_spec(config.actor.policy_loss.loss_mode)),
      kl_loss_type_(parse_kl_estimator(config.actor.kl_loss_type, "actor.kl_loss_type")) {
  state_.set_lora_record(lora_record_);
  if (trainable && config.distillation.enable) {
    const DistillSpec spec = distill_spec(config.distillation.loss_mode);
    if (!spec.reward) distill_loss_ = spec;
  }
}

std::unique_ptr<Actor> Actor::policy(const Config& config, int64_t vocab_size, int64_t total_optimizer_steps,
                                     torch::Device device, int64_t micro_batch_size) {
  std::unique_ptr<Actor> actor(
      new Actor(config, vocab_size, /*trainable=*/true, total_optimizer_steps, device, config.parallel.zero_stage));
  actor->micro_batch_size_ = micro_batch_size;
  return actor;
}

std::unique_ptr<Actor> Actor::reference(const Config& config, int64_t vocab_size, torch::Device device,
                                        int64_t zero_stage) {
  return std::unique_ptr<Actor>(
      new Actor(config, vocab_size, /*trainable=*/false, /*total_optimizer_steps=*/0, device, zero_stage));
}

MicroBatchSpec actor_micro_spec(const Config& config, int64_t micro_batch_size) {
  const ActorConfig& a = config.actor;
  MicroBatchSpec spec{micro_batch_size > 0 ? micro_batch_size : a.ppo_micro_batch_size_per_gpu,
                      a.use_dynamic_bsz ? a.ppo_max_token_len_per_gpu : 0, "actor.ppo_max_token_len_per_gpu"};
  spec.packed = a.use_remove_padding;
  return spec;
}

UpdateSchedule Actor::schedule(int64_t epochs, int64_t mini_batches, int64_t shuffle_seed) const {
  UpdateSchedule s;
  s.epochs = epochs;
  s.mini_batches = mini_batches;
  s.micro = actor_micro_spec(config_, micro_batch_size_);
  s.metric_prefix = "actor";
  s.shuffle_seed = shuffle_seed;
  s.device = state_.device();
  s.same_micro_count = state_.zero_stage() >= 2;
  return s;
}

torch::Tensor Actor::compute_base_log_probs(const Batch& batch, const MicroBatchSpec& micro) {
  LoraDisabled base(*model_->model);
  return compute_log_probs(batch, micro);
}

bool Actor::has_lora() const {
  return ppo::has_lora(*model_->model);
}

torch::Tensor Actor::compute_log_probs(const Batch& batch, const MicroBatchSpec& micro) {
  LogProbOptions options;
  options.entropy = false;
  return compute_token_log_probs(batch, micro, options).log_probs;
}

TokenLogProbs Actor::compute_token_log_probs(const Batch& batch, const MicroBatchSpec& micro,
                                             const LogProbOptions& options) {
  TORCH_CHECK(!options.at_ids.defined(), "Actor::compute_token_log_probs: at_ids is the update's");
  torch::NoGradGuard no_grad;
  WorkerState::Phase phase(state_, /*whole_model=*/false);
  model_->eval();
  MicroBatchSpec spec = micro;
  spec.packed = config_.actor.use_remove_padding;
  std::vector<MicroBatch> micros = rank_micro_batches(batch, spec, state_.zero_stage() == 3, Context::get());
  std::vector<TokenLogProbs> parts;
  for (const MicroBatch& piece : micros)
    parts.push_back(log_probs(piece.batch, spec.packed, config_.rollout.temperature, options));
  const int64_t B = batch.size(), R = batch.at(field::responses).size(1);
  if (parts.empty()) {  // a rank without rows
    TokenLogProbs none;
    none.log_probs = torch::zeros({B, R});
    return none;
  }
  return join_token_log_probs(parts, [&](const std::vector<torch::Tensor>& pieces) {
    std::vector<torch::Tensor> on_host;
    for (const torch::Tensor& piece : pieces) on_host.push_back(piece.cpu());
    return gather_micro_results(micros, on_host, B, R);
  });
}

namespace {

// An MoE policy's routing replay (actor.router_replay=R3) in the forwards of one micro-batch: while alive, the model
// routes each token through the experts the rollout recorded (the batch's routed_experts, in the forward's token
// order: packed, the real tokens row after row) and records its routers' own choices.
class RoutingReplay {
 public:
  RoutingReplay(TransformerImpl& model, const Batch& micro, bool packed) : model_(model) {
    if (!micro.has(field::routed_experts) || !model.has_moe()) return;
    torch::Tensor routed = micro.at(field::routed_experts);  // [b, T, MoE layers, k]
    routed = routed.reshape({-1, routed.size(2), routed.size(3)});
    real_ = micro.at(field::attention_mask).reshape({-1}).ne(0).to(routed.device());
    if (packed) {
      routed = routed.index_select(0, real_.nonzero().squeeze(1));
      real_ = torch::ones({routed.size(0)}, real_.options());
    }
    model.replay_experts = routed.to(model.embed_tokens->weight.device());
    model.record_routing = true;
  }
  ~RoutingReplay() {
    model_.replay_experts = torch::Tensor();
    model_.record_routing = false;
  }
  RoutingReplay(const RoutingReplay&) = delete;
  RoutingReplay& operator=(const RoutingReplay&) = delete;
  bool active() const { return real_.defined(); }
  // After the forward: the (real token, MoE layer) pairs with a recorded routing, and those whose router would have
  // chosen other experts than the replayed ones (float64 scalars on the model's device).
  std::pair<torch::Tensor, torch::Tensor> mismatch() const {
    const torch::Tensor given = model_.replay_experts.to(torch::kLong);
    const torch::Tensor own = model_.chosen_experts().to(given.device(), torch::kLong);
    const torch::Tensor counted = given.select(2, 0).ge(0).logical_and(real_.to(given.device()).unsqueeze(1));
    const torch::Tensor differ = std::get<0>(own.sort(-1)).ne(std::get<0>(given.sort(-1))).any(-1);
    return {counted.sum().to(torch::kDouble), differ.logical_and(counted).sum().to(torch::kDouble)};
  }

 private:
  TransformerImpl& model_;
  torch::Tensor real_;  // [N] bool: the forward's real tokens
};

// The log-probs (and what `options` asks for) of a micro-batch on the model's device: packed when `packed` is given.
// With `routing` (actor.router_replay=R3) through the rollout's routing, counting the pairs whose router differs.
TokenLogProbs micro_log_probs(CausalLM& model, const Batch& micro, const PackedSequences* packed, double temperature,
                              const LogProbOptions& options = {}, RoutingCount* routing = nullptr) {
  std::optional<RoutingReplay> replay;
  if (routing) replay.emplace(*model->model, micro, packed != nullptr);
  TokenLogProbs out = packed
                          ? compute_log_probs_packed(model, *packed, temperature, options)
                          : ppo::compute_log_probs(model, micro.at(field::input_ids), micro.at(field::attention_mask),
                                                   micro.at(field::position_ids), micro.at(field::responses).size(1),
                                                   temperature, /*micro_batch_size=*/0, options);
  if (replay && replay->active()) {
    const auto [pairs, differ] = replay->mismatch();
    routing->add(pairs, differ);
  }
  return out;
}

}  // namespace

TokenLogProbs Actor::log_probs(const Batch& host_micro, bool packed, double temperature,
                               const LogProbOptions& options) {
  RoutingCount* routing = replays_routing() ? &routing_count_ : nullptr;
  if (!packed) return micro_log_probs(model_, host_micro.to(state_.device()), nullptr, temperature, options, routing);
  const PackedSequences on_device = pack_sequences(host_micro).to(state_.device());
  return micro_log_probs(model_, host_micro, &on_device, temperature, options, routing);
}

namespace {

// The teacher's top tokens of a micro-batch's positions, [b, R, k]; packed, of its real response tokens, [M, k].
torch::Tensor teacher_topk_ids(const Batch& micro, const PackedSequences* packed) {
  const torch::Tensor& ids = micro.at(field::teacher_topk_ids);
  if (!packed) return ids;
  return ids.reshape({-1, ids.size(2)}).index_select(0, packed->targets);
}

// Adds a token-level quantity's masked sum and token count (a global token mean after reduction).
void add_token_mean(DeviceMeans& metrics, const std::string& name, const torch::Tensor& values,
                    const torch::Tensor& mask) {
  metrics.add(name, (values.detach() * mask).sum(), mask.sum());
}

// An MoE model's router losses in the micro-batch's loss: model.moe.router_aux_loss_coef times transformers'
// load-balancing loss and router_z_loss_coef times the z-loss, each weighted by the micro-batch's share of the
// mini-batch's response tokens (`tokens` of `all_tokens`), so that the mini-batch's gradient is that of their
// token-weighted mean; their gradients enter in the backward (model/moe.h). Metrics: moe/aux_loss, moe/z_loss, and
// the most and least loaded expert's share of the assignments times E (1 = balanced), means over micro-batches.
void add_router_losses(TransformerImpl& backbone, const torch::Tensor& tokens, double all_tokens, DeviceMeans& m) {
  const std::shared_ptr<MoeRouting>& routing = backbone.last_routing;
  if (!backbone.has_moe() || !routing) return;
  routing->loss_scale = all_tokens > 0 ? tokens.item<double>() / all_tokens : 0;
  m.add("moe/aux_loss", routing->aux_loss().to(torch::kDouble), 1.0);
  m.add("moe/z_loss", routing->z_loss().to(torch::kDouble), 1.0);
  const torch::Tensor load = routing->expert_load();
  m.add("moe/expert_load_max", load.max().to(torch::kDouble), 1.0);
  m.add("moe/expert_load_min", load.min().to(torch::kDouble), 1.0);
}

}  // namespace

void Actor::update_policy(const Batch& batch, int64_t mini_batches, Context& context, Metrics& metrics) {
  const ActorConfig& a = config_.actor;
  WorkerState::Phase phase(state_, /*whole_model=*/false);
  model_->train();
  state_.seed_dropout(config_.trainer.seed);
  PolicyLossParams params;
  params.loss = &policy_loss_;
  params.clip_ratio_low = a.clip_ratio_low >= 0 ? a.clip_ratio_low : a.clip_ratio;
  params.clip_ratio_high = a.clip_ratio_high >= 0 ? a.clip_ratio_high : a.clip_ratio;
  params.clip_ratio_c = a.clip_ratio_c;
  params.loss_agg_mode = loss_agg_mode_;
  params.norm_length = static_cast<double>(config_.data.max_response_length);
  const bool is_root = context.is_root();
  run_updates(
      batch, schedule(a.ppo_epochs, mini_batches, a.shuffle ? config_.trainer.seed : -1), optimizer(), context, metrics,
      [&](const Batch& micro, const PackedSequences* packed, const Denominators& d, DeviceMeans& m) {
        const torch::Tensor& mask = micro.at(field::response_mask);
        LogProbOptions options;
        if (distill_loss_ && distill_loss_->uses_topk()) options.at_ids = teacher_topk_ids(micro, packed);
        RoutingCount drift;  // the update's routers (on weights the earlier mini-batches moved) against the rollout's
        TokenLogProbs lp = micro_log_probs(model_, micro, packed, config_.rollout.temperature, options,
                                           replays_routing() ? &drift : nullptr);
        if (drift.pairs.defined()) m.add_if_any("moe/routing_mismatch_update", drift.differ, drift.pairs);
        params.denominator = agg_denominator(loss_agg_mode_, d.tokens, d.sequences);
        params.rollout_is_weights =
            micro.has(field::rollout_is_weights) ? micro.at(field::rollout_is_weights) : torch::Tensor();
        PolicyLoss pl =
            policy_loss(micro.at(field::old_log_probs), lp.log_probs, micro.at(field::advantages), mask, params);
        torch::Tensor loss = pl.loss;
        const torch::Tensor tokens = mask.sum();
        m.add("actor/pg_loss", pl.loss, is_root && d.first_micro ? 1 : 0);
        m.add("actor/pg_clipfrac", pl.clipfrac.detach() * tokens, tokens);
        m.add("actor/pg_clipfrac_lower", pl.clipfrac_lower.detach() * tokens, tokens);
        m.add("actor/ppo_kl", pl.ppo_kl.detach() * tokens, tokens);
        add_token_mean(m, "actor/entropy", lp.entropy, mask);
        for (const auto& [name, in_class] :
             entropy_token_classes(micro.at(field::advantages), mask,
                                   micro.has(field::correct) ? micro.at(field::correct) : torch::Tensor(),
                                   micro.has(field::has_correct) ? micro.at(field::has_correct) : torch::Tensor()))
          m.add_if_any("actor/entropy_" + name, (lp.entropy.detach() * in_class).sum(), in_class.sum());
        if (a.entropy_coeff != 0)
          loss = loss -
                 a.entropy_coeff * agg_loss(lp.entropy, mask, loss_agg_mode_, params.denominator, params.norm_length);
        if (a.use_kl_loss) {
          torch::Tensor kl = kl_penalty(lp.log_probs, micro.at(field::ref_log_probs), kl_loss_type_);
          loss = loss + a.kl_loss_coef * agg_loss(kl, mask, loss_agg_mode_, params.denominator, params.norm_length);
          add_token_mean(m, "actor/kl_loss", kl, mask);
        }
        if (distill_loss_) {
          const DistillationConfig& dc = config_.distillation;
          const torch::Tensor losses =
              distill_loss_->uses_topk() ? topk_distill_losses(lp.at_log_probs, micro.at(field::teacher_topk_log_probs),
                                                               *distill_loss_, dc.jsd_beta, dc.loss_clamp)
                                         : distill_token_losses(lp.log_probs, micro.at(field::teacher_log_probs),
                                                                *distill_loss_, dc.loss_clamp);
          loss = loss + dc.distillation_loss_coef *
                            agg_loss(losses, mask, loss_agg_mode_, params.denominator, params.norm_length);
          add_token_mean(m, "actor/distill_loss", losses, mask);
          // The student's probability on the teacher's k tokens (veRL's student_mass).
          if (distill_loss_->uses_topk())
            add_token_mean(m, "actor/distill_student_topk_mass", lp.at_log_probs.exp().sum(-1), mask);
        }
        add_router_losses(*model_->model, tokens, d.tokens, m);
        return loss;
      });
  if (a.use_kl_loss) metrics.set("actor/kl_coef", a.kl_loss_coef);
}

void Actor::update_sft(const Batch& batch, int64_t mini_batches, Context& context, Metrics& metrics) {
  WorkerState::Phase phase(state_, /*whole_model=*/false);
  model_->train();
  state_.seed_dropout(config_.trainer.seed);
  run_updates(batch, schedule(1, mini_batches, -1), optimizer(), context, metrics,
              [&](const Batch& micro, const PackedSequences* packed, const Denominators& d, DeviceMeans& m) {
                const torch::Tensor& mask = micro.at(field::response_mask);
                TokenLogProbs lp = micro_log_probs(model_, micro, packed, /*temperature=*/1.0);
                torch::Tensor nll = -lp.log_probs;
                add_token_mean(m, "sft/loss", nll, mask);
                // Mean probability the model gives the target token.
                add_token_mean(m, "sft/target_prob", lp.log_probs.exp(), mask);
                return agg_loss(nll, mask, LossAggMode::kTokenMean, d.tokens);
              });
}

void Actor::save(const std::string& dir) const {
  state_.save(*model_, dir, "actor");
}

void Actor::load(const std::string& dir, bool with_optimizer) {
  state_.load(*model_, dir, "actor", with_optimizer);
}

}  // namespace ppo
