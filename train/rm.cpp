// ppo rm: Bradley-Terry training of a reward model on preference pairs.
#include "train/rm.h"

#include <chrono>
#include <cstdio>
#include <iostream>

#include "parallel/dispatch.h"
#include "train/prompts.h"

namespace ppo {

Batch pair_batch(const std::vector<const EncodedPair*>& pairs, const std::vector<bool>& is_pad, int64_t pad_id) {
  const int64_t B = 2 * static_cast<int64_t>(pairs.size());
  int64_t P = 1, R = 1;
  for (const EncodedPair* pair : pairs) {
    P = std::max(P, static_cast<int64_t>(pair->prompt.size()));
    R = std::max({R, static_cast<int64_t>(pair->chosen.size()), static_cast<int64_t>(pair->rejected.size())});
  }
  torch::Tensor input_ids = torch::full({B, P + R}, pad_id, torch::kInt64);
  torch::Tensor attention = torch::zeros({B, P + R}, torch::kInt64);
  torch::Tensor response_mask = torch::zeros({B, R});
  torch::Tensor sample_mask = torch::ones({B}), margins = torch::zeros({B});
  auto ids = input_ids.accessor<int64_t, 2>();
  auto real = attention.accessor<int64_t, 2>();
  for (size_t i = 0; i < pairs.size(); ++i) {
    const EncodedPair& pair = *pairs[i];
    for (int64_t side = 0; side < 2; ++side) {
      const int64_t row = 2 * static_cast<int64_t>(i) + side;
      const std::vector<int64_t>& response = side == 0 ? pair.chosen : pair.rejected;
      const int64_t offset = P - static_cast<int64_t>(pair.prompt.size());
      for (size_t t = 0; t < pair.prompt.size(); ++t) ids[row][offset + t] = pair.prompt[t], real[row][offset + t] = 1;
      for (size_t t = 0; t < response.size(); ++t) ids[row][P + t] = response[t], real[row][P + t] = 1;
      response_mask[row].narrow(0, 0, static_cast<int64_t>(response.size())).fill_(1.f);
      margins[row] = pair.margin;
      if (is_pad[i]) sample_mask[row] = 0.f;
    }
  }
  Batch batch = sequence_batch(input_ids, attention, P, response_mask, sample_mask);
  batch.set(field::margins, margins);
  return batch;
}

PairSums pair_sums(const torch::Tensor& scores, const Batch& batch) {
  const torch::Tensor s = scores.to(torch::kFloat64).view({-1, 2});
  const torch::Tensor real = batch.at(field::sample_mask).to(torch::kFloat64).view({-1, 2}).select(1, 0);
  const torch::Tensor margin = batch.at(field::margins).to(torch::kFloat64).view({-1, 2}).select(1, 0);
  const torch::Tensor diff = s.select(1, 0) - s.select(1, 1);
  PairSums sums;
  sums.pairs = real.sum().item<double>();
  sums.loss = (-torch::log_sigmoid(diff - margin) * real).sum().item<double>();
  sums.correct = (diff.gt(0).to(torch::kFloat64) * real).sum().item<double>();
  sums.margin = (diff * real).sum().item<double>();
  return sums;
}

namespace {

// This rank's share of `positions`' pairs of `pairs` (dispatch_positions over `block`), as pair_batch's batch.
Batch rank_pair_batch(const std::vector<EncodedPair>& pairs, const std::vector<int64_t>& indices, int64_t block,
                      bool pad, const Context& context, int64_t pad_id) {
  std::vector<const EncodedPair*> mine;
  std::vector<bool> is_pad;
  const int64_t B = static_cast<int64_t>(indices.size());
  for (int64_t p : dispatch_positions(B, std::min(block, B), context.world_size(), context.rank(), pad)) {
    is_pad.push_back(p < 0);
    mine.push_back(&pairs[indices[p < 0 ? -1 - p : p]]);
  }
  return pair_batch(mine, is_pad, pad_id);
}

}  // namespace

RmSteps::RmSteps(Run& run)
    : WorkerSteps(run.context(), &TrainerState::critic_optimizer_steps),
      run_(run),
      config_(run.config()),
      context_(run.context()),
      in_(run.inputs()) {
  const RunShape& d = run_.shape();
  const int64_t total = run.schedule().total_steps();
  const int64_t vocab = vocab_size_for(config_, *in_.tokenizer);
  worker_ = std::make_unique<Critic>(config_, vocab, total * d.critic_mini_batches * config_.critic.ppo_epochs,
                                     context_.device(), d.critic_micro_batch_size);
  if (context_.is_root()) {
    for (const std::string& note : d.notes) std::cout << "note: " << note << "\n";
    std::cout << "rm: " << worker_->state().parameter_count() << " parameters, " << total << " steps of "
              << config_.data.train_batch_size << " pairs (" << in_.train_pairs.size() << " training, "
              << in_.val_pairs.size() << " validation pairs); run directory: " << run.run_dir().path() << "\n";
  }
}

std::map<std::string, double> RmSteps::step(int64_t step) {
  const auto start = std::chrono::steady_clock::now();
  Metrics m;
  const Batch batch =
      rank_pair_batch(in_.train_pairs, run_.schedule().prompt_indices(step), run_.shape().dispatch_block,
                      config_.parallel.pad_to_world, context_, in_.tokenizer->pad_id());
  worker_->update_pairs(batch, run_.shape().critic_mini_batches, context_, m);
  m.add_max("memory/model_state_mib", static_cast<double>(worker_->state().model_state_bytes()) / (1 << 20));
  m.set("timing_s/step", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  std::map<std::string, double> metrics = m.reduce(context_);
  metrics["training/global_step"] = static_cast<double>(step);
  return metrics;
}

ValMetrics RmSteps::validate(int64_t) {
  const int64_t N = static_cast<int64_t>(in_.val_pairs.size()), chunk = config_.data.val_batch_size;
  if (N == 0) return {};
  torch::Tensor sums = torch::zeros({4}, torch::kFloat64);
  for (int64_t start = 0; start < N; start += chunk) {
    std::vector<int64_t> indices;
    for (int64_t i = start; i < std::min(N, start + chunk); ++i) indices.push_back(i);
    const Batch batch = rank_pair_batch(in_.val_pairs, indices, static_cast<int64_t>(indices.size()),
                                        /*pad=*/true, context_, in_.tokenizer->pad_id());
    const PairSums s = pair_sums(worker_->compute_scores(batch), batch);
    sums += torch::tensor({s.pairs, s.loss, s.correct, s.margin}, torch::kFloat64);
  }
  context_.all_reduce(sums, ReduceOp::sum);
  const double pairs = sums[0].item<double>();
  return {{"val/pairs/acc/mean", sums[2].item<double>() / pairs},
          {"val/pairs/margin/mean", sums[3].item<double>() / pairs},
          {"val/pairs/loss/mean", sums[1].item<double>() / pairs}};
}

std::string RmSteps::progress(const std::map<std::string, double>& metrics) const {
  auto at = [&](const std::string& key) { return metrics.count(key) ? metrics.at(key) : 0.0; };
  char text[128];
  std::snprintf(text, sizeof text, "loss %.4f acc %.3f margin %.3f", at("rm/loss"), at("rm/accuracy"), at("rm/margin"));
  std::string out = text;
  if (metrics.count("val/pairs/margin/mean")) {
    std::snprintf(text, sizeof text, " | val margin %.3f", at("val/pairs/margin/mean"));
    out += text;
  }
  return out;
}

std::string RmSteps::val_report(const ValMetrics& val, const std::string&) const {
  char text[96];
  std::snprintf(text, sizeof text, "pair acc %.3f margin %.3f loss %.4f", val.at("val/pairs/acc/mean"),
                val.at("val/pairs/margin/mean"), val.at("val/pairs/loss/mean"));
  return text;
}

void RmSteps::summarize() {
  const std::string checkpoint =
      run_.run_dir().path() + "/checkpoints/global_step_" + std::to_string(run_.schedule().total_steps());
  std::printf("rm checkpoint: %s (ppo export --checkpoint %s --out DIR writes the reward model's folder)\n",
              checkpoint.c_str(), checkpoint.c_str());
}

int run_rm(const Config& config) {
  return fit_run<RmSteps>(config, RunMode::reward_model);
}

}  // namespace ppo
