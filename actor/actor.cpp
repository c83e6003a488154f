#include "actor/actor.h"

#include <filesystem>

#include "common/error.h"
#include "model/hf.h"
#include "rl/algorithms.h"
#include "rollout/rollout.h"

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

Actor::Actor(const Config& config, int64_t vocab_size, bool trainable, int64_t total_optimizer_steps,
             torch::Device device)
    : config_(config), device_(device), model_(config.model, vocab_size) {
  if (!config.actor.init_checkpoint.empty()) load_module(*model_, config.actor.init_checkpoint + "/actor.pt");
  if (config.actor.init_checkpoint.empty() && !config.model.path.empty())
    load_hf_weights(*model_, config.model.path, /*allow_missing_value_head=*/false);
  const OffloadConfig& offload = trainable ? config.actor.offload : config.ref.offload;
  placement_ = std::make_unique<ParamPlacement>(model_->parameters(), device_, offload.param);
  if (trainable) {
    optimizer_ = std::make_unique<Optimizer>(model_->parameters(), config.actor.optim, config.actor.grad_clip,
                                             total_optimizer_steps, offload);
  } else {
    for (auto& p : model_->parameters()) p.set_requires_grad(false);
  }
}

MicroBatchSpec actor_micro_spec(const Config& config) {
  const ActorConfig& a = config.actor;
  return {a.ppo_micro_batch_size_per_gpu, a.use_dynamic_bsz ? a.ppo_max_token_len_per_gpu : 0,
          "actor.ppo_max_token_len_per_gpu"};
}

UpdateSchedule Actor::schedule(int64_t epochs, int64_t mini_batches, int64_t shuffle_seed) const {
  UpdateSchedule s;
  s.epochs = epochs;
  s.mini_batches = mini_batches;
  s.micro = actor_micro_spec(config_);
  s.metric_prefix = "actor";
  s.shuffle_seed = shuffle_seed;
  s.device = device_;
  return s;
}

torch::Tensor Actor::compute_log_probs(const Batch& batch, const MicroBatchSpec& micro) {
  torch::NoGradGuard no_grad;
  OnDevice on(*placement_);
  model_->eval();
  std::vector<MicroBatch> micros = make_micro_batches(batch, micro);
  std::vector<torch::Tensor> parts;
  for (const MicroBatch& m : micros) {
    Batch b = m.batch.to(device_);
    parts.push_back(ppo::compute_log_probs(model_, b.at("input_ids"), b.at("attention_mask"), b.at("position_ids"),
                                           b.at("responses").size(1), config_.rollout.temperature)
                        .log_probs.cpu());
  }
  return gather_micro_results(micros, parts, batch.size(), batch.at("responses").size(1));
}

namespace {

double denominator_for(const std::string& mode, const Denominators& d) {
  return mode == "token-mean" ? d.tokens : d.sequences;
}

// Adds a token-level quantity's masked sum and token count (a global token mean after reduction).
void add_token_mean(Metrics& metrics, const std::string& name, const torch::Tensor& values, const torch::Tensor& mask) {
  metrics.add_mean(name, (values.detach() * mask).sum().item<double>(), mask.sum().item<double>());
}

}  // namespace

void Actor::update_policy(const Batch& batch, int64_t mini_batches, Context& context, Metrics& metrics) {
  const ActorConfig& a = config_.actor;
  OnDevice on(*placement_);
  model_->train();
  PolicyLossParams params;
  params.clip_ratio_low = a.clip_ratio_low >= 0 ? a.clip_ratio_low : a.clip_ratio;
  params.clip_ratio_high = a.clip_ratio_high >= 0 ? a.clip_ratio_high : a.clip_ratio;
  params.clip_ratio_c = a.clip_ratio_c;
  params.loss_agg_mode = a.loss_agg_mode;
  params.norm_length = static_cast<double>(config_.data.max_response_length);
  const bool is_root = context.is_root();
  run_updates(
      batch, schedule(a.ppo_epochs, mini_batches, a.shuffle ? config_.trainer.seed : -1), *optimizer_, context, metrics,
      [&](const Batch& micro, const Denominators& d, Metrics& m) {
        const torch::Tensor& mask = micro.at("response_mask");
        TokenLogProbs lp =
            ppo::compute_log_probs(model_, micro.at("input_ids"), micro.at("attention_mask"), micro.at("position_ids"),
                                   micro.at("responses").size(1), config_.rollout.temperature);
        params.denominator = denominator_for(a.loss_agg_mode, d);
        PolicyLoss pl = policy_loss(micro.at("old_log_probs"), lp.log_probs, micro.at("advantages"), mask, params);
        torch::Tensor loss = pl.loss;
        const double tokens = mask.sum().item<double>();
        m.add_mean("actor/pg_loss", pl.loss.item<double>(), is_root && d.first_micro ? 1 : 0);
        m.add_mean("actor/pg_clipfrac", pl.clipfrac.item<double>() * tokens, tokens);
        m.add_mean("actor/pg_clipfrac_lower", pl.clipfrac_lower.item<double>() * tokens, tokens);
        m.add_mean("actor/ppo_kl", pl.ppo_kl.item<double>() * tokens, tokens);
        add_token_mean(m, "actor/entropy", lp.entropy, mask);
        if (a.entropy_coeff != 0)
          loss = loss -
                 a.entropy_coeff * agg_loss(lp.entropy, mask, a.loss_agg_mode, params.denominator, params.norm_length);
        if (a.use_kl_loss) {
          torch::Tensor kl = kl_penalty(lp.log_probs, micro.at("ref_log_probs"), a.kl_loss_type, "actor.kl_loss_type");
          loss = loss + a.kl_loss_coef * agg_loss(kl, mask, a.loss_agg_mode, params.denominator, params.norm_length);
          add_token_mean(m, "actor/kl_loss", kl, mask);
          m.set("actor/kl_coef", a.kl_loss_coef);
        }
        return loss;
      });
}

void Actor::update_sft(const Batch& batch, int64_t mini_batches, Context& context, Metrics& metrics) {
  OnDevice on(*placement_);
  model_->train();
  run_updates(batch, schedule(1, mini_batches, -1), *optimizer_, context, metrics,
              [&](const Batch& micro, const Denominators& d, Metrics& m) {
                const torch::Tensor& mask = micro.at("response_mask");
                TokenLogProbs lp = ppo::compute_log_probs(model_, micro.at("input_ids"), micro.at("attention_mask"),
                                                          micro.at("position_ids"), micro.at("responses").size(1),
                                                          /*temperature=*/1.0);
                torch::Tensor nll = -lp.log_probs;
                add_token_mean(m, "sft/loss", nll, mask);
                // Mean probability the model gives the target token.
                add_token_mean(m, "sft/target_prob", lp.log_probs.exp(), mask);
                return agg_loss(nll, mask, "token-mean", d.tokens);
              });
}

void Actor::save(const std::string& dir) const {
  save_module(*model_, dir + "/actor.pt");
  if (optimizer_) optimizer_->save(dir + "/actor_optim.pt");
}

void Actor::load(const std::string& dir, bool with_optimizer) {
  load_module(*model_, dir + "/actor.pt");
  if (with_optimizer && optimizer_) optimizer_->load(dir + "/actor_optim.pt");
}

}  // namespace ppo
