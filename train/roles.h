// Rollout ranks and trainer ranks (parallel.rollout_ranks, async.max_staleness): what passes between the two roles,
// over the whole job's communicator, and the rollout ranks' side of the loop. The trainers' side is PpoSteps
// (train/trainer.h). docs/architecture.md shows the step as data flows.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/batch.h"
#include "common/config.h"
#include "common/running_moments.h"
#include "parallel/context.h"
#include "train/run.h"
#include "train/step_generator.h"
#include "workers/actor.h"

namespace ppo {

// A step's batch as the rollout ranks deliver it to the trainers.
struct Delivery {
  Batch global;                           // every rollout rank's rows, in their order
  std::vector<int64_t> group_rows;        // the first row of each real group (n adjacent rows), in prompt order
  std::map<std::string, double> metrics;  // the rollout's, reduced over the rollout ranks (timing_s/gen, reward/...)
  int64_t policy_version = 0;             // the global step whose weights generated it (0: the initial ones)
  int64_t gen_batches = 0;                // generation batches taken, this batch's included
  RunningMoments reward_moments;          // reward_model.normalize's, this batch's included
};

// A batch a rollout rank has generated and not yet sent.
struct PendingBatch {
  Batch rows;
  std::map<std::string, double> metrics;  // reduced over the rollout ranks
  int64_t policy_version = 0, gen_batches = 0;
  RunningMoments reward_moments;
};

// Rollout ranks: `generated`, to every trainer. Trainers: the batch, from every rollout rank (pass `n`,
// rollout.n, and the tokenizer's `pad_id`). One collective of the whole job, which both roles call at the same point.
void send_batch(Context& context, const PendingBatch& generated);
Delivery receive_batch(Context& context, int64_t n, int64_t pad_id);
// This trainer's rows of a delivery, dealt as a colocated rank's rows are (dispatch_groups with the trainers'
// block, world and padding): K rollout ranks and T trainers hold what T colocated ranks hold.
Batch trainer_rows(const Delivery& delivery, const Config& config, int64_t dispatch_block, const Context& context);

// The weights after an optimizer step, from the first trainer to every rollout rank (a broadcast over the weight-sync
// group; over NCCL for CUDA tensors): the whole policy, or with LoRA its adapters. Every trainer calls it (at ZeRO
// stage 3 they gather the whole policy first); so does every rollout rank, which receives.
void sync_weights(Context& context, Actor& policy);

// Where the run starts, from the first trainer to every rank, at the first step or validation: the version of the
// weights (the step resumed from, else 0), the generation batches taken, and whether the checkpoint holds a batch
// generated before it (async.max_staleness=1), which the rollout ranks then do not generate again, and
// reward_model.normalize's moments.
struct RolesStart {
  int64_t policy_version = 0, gen_batches = 0;
  bool in_flight = false;
  RunningMoments reward_moments;
};
RolesStart share_start(Context& context, const RolesStart& start);

// Validation runs on the rollout ranks: their metrics, from the first rollout rank to every rank.
std::map<std::string, double> share_validation(Context& context, const std::map<std::string, double>& metrics);

// Whether the batch of step + 1 is generated during `step` (async.max_staleness=1): at every step but the last, and
// at the last too when it writes a checkpoint, which then holds that batch, so that a run extended past its end
// trains as the longer run straight through would. Both roles ask it.
bool generates_ahead(const Config& config, const StepSchedule& schedule, int64_t step);

// A batch in flight at a checkpoint (async.max_staleness=1), in <checkpoint>/rollout_batch.safetensors, verified
// against the checkpoint's manifest and read field by field: each field the rollout writes, with its dtype and shape
// (`config`: the batch's sizes), and its description: generated from the weights before the checkpoint's step
// (`state`: its trainer state), at the sampler position and reward moments the state records. Anything else is a
// UsageError naming the file and the field.
void save_delivery(const std::string& path, const Delivery& delivery);
Delivery load_delivery(const std::string& path, const Config& config, const TrainerState& state);
constexpr const char* kDeliveryFile = "rollout_batch.safetensors";

// The rollout ranks' steps: generate and score each step's batch with the latest weights received, send it, receive
// the weights of the step; with async.max_staleness=1 the next batch is generated while the trainers update.
// Validation runs here. Nothing is written: the trainers keep the run directory and the checkpoints.
class RolloutSteps : public RunSteps {
 public:
  explicit RolloutSteps(Run& run);

  std::string kind() const override { return "ppo"; }
  std::map<std::string, double> step(int64_t step) override;
  ValMetrics validate(int64_t step) override;
  std::string progress(const std::map<std::string, double>&) const override { return ""; }
  void save(const std::string&, TrainerState&) override {}
  void load(const std::string&, const TrainerState&) override {}  // the trainers send where the run stands
  void check_identical(const std::string& when) override;

 private:
  void start();  // once, before the first step or validation
  PendingBatch generate(int64_t step);

  Run& run_;
  const Config& config_;
  Context& context_;
  std::unique_ptr<Actor> policy_;  // frozen, whole: the weights the trainers send
  StepGenerator generator_;
  int64_t version_ = 0;  // the global step whose weights the policy holds
  bool started_ = false;
  bool sent_ahead_ = false;  // the next step's batch has been sent already
};

}  // namespace ppo
