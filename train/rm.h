// ppo rm: a reward model trained on preference pairs (the Bradley-Terry loss of InstructGPT's second stage, as
// TRL's RewardTrainer and OpenRLHF's train_rm), on the critic's keys: its model (model.path, critic.model.path or
// critic.init_checkpoint, e.g. an SFT run's), critic.optim, critic.lora, critic.ppo_mini_batch_size (pairs),
// critic.ppo_micro_batch_size_per_gpu (sequences, two per pair), critic.use_remove_padding (packing). Its checkpoint
// holds critic.pt: PPO's critic.init_checkpoint starts from it, and `ppo export` writes it as a
// *ForSequenceClassification folder that reward_model.model.path reads.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/batch.h"
#include "common/config.h"
#include "train/prompts.h"
#include "train/run.h"
#include "workers/critic.h"

namespace ppo {

// Pairs in ppo rm's layout: rows 2i and 2i + 1 are pair i's chosen and rejected sequences, the prompt left-padded
// and the response (ids + EOS) right-padded to the longest of the rows; field::margins the pair's margin, and
// sample_mask 0 on both rows of a padding pair (`is_pad`).
Batch pair_batch(const std::vector<const EncodedPair*>& pairs, const std::vector<bool>& is_pad, int64_t pad_id);

// The loss, accuracy and margin of scored pairs (scores [2P] in pair_batch's order), summed over the real pairs.
struct PairSums {
  double pairs = 0, loss = 0, correct = 0, margin = 0;
};
PairSums pair_sums(const torch::Tensor& scores, const Batch& batch);

// ppo rm's step, plugged into a Run (train/run.h): the Bradley-Terry loss on each step's data.train_batch_size
// pairs; validation on data.val_files' pairs: val/pairs/acc/mean (chosen scored above rejected), margin and loss.
class RmSteps : public WorkerSteps<Critic> {
 public:
  explicit RmSteps(Run& run);
  std::string kind() const override { return "rm"; }
  std::map<std::string, double> step(int64_t step) override;
  ValMetrics validate(int64_t step) override;
  std::string progress(const std::map<std::string, double>& metrics) const override;
  std::string val_report(const ValMetrics& val, const std::string& source) const override;
  void summarize() override;

 private:
  Run& run_;
  const Config& config_;
  Context& context_;
  RunInputs& in_;
};

// ppo rm: checks the config, then trains. Returns the exit status.
int run_rm(const Config& config);

}  // namespace ppo
