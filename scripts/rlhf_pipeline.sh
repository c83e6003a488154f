#!/usr/bin/env bash
# The RLHF pipeline in miniature, InstructGPT's three stages on the `reverse` toy task and the tiny model:
#   1. SFT: README's short supervised warm start (configs/reverse_sft.yaml);
#   2. a reward model: the SFT policy samples 8 responses to each of 1024 prompts, the task's rule picks the better
#      and the worse of each prompt's (scripts/preference_pairs.py), and `ppo rm` learns to prefer the better
#      (configs/reverse_rm.yaml); `ppo export` writes it as a LlamaForSequenceClassification folder;
#   3. PPO whose only reward is that model (reward_model.rule_weight 0: the rule is never PPO's reward), for STEPS
#      steps (default 600, twice README's run, to show whether the policy over-optimises the reward model).
# Validation scores with the rule throughout, so the table (scripts/rlhf_table.py) sets the rule's accuracy against
# the reward model's score.
#   bash scripts/rlhf_pipeline.sh [OUT_DIR [STEPS [key=value ...]]]
# (default runs/rlhf, 600; the key=value overrides go to the PPO stage, e.g. algorithm.use_kl_in_reward=true
# algorithm.kl_ctrl.kl_coef=0.1 for InstructGPT's KL penalty; PPO=path/to/ppo chooses the binary)
set -euo pipefail
cd "$(dirname "$0")/.."
ppo=${PPO:-build/ppo}
out=${1:-runs/rlhf}
steps=${2:-600}
mkdir -p "$out"
"$ppo" sft --config configs/reverse_sft.yaml trainer.output_dir="$out/sft"
sft="$out/sft/checkpoints/global_step_20"
# Prompts of another seed than the runs' own validation prompts, sampled at temperature 1 as in PPO.
"$ppo" generate --config configs/reverse_sft.yaml actor.init_checkpoint="$sft" data.seed=11 data.val_size=1024 \
  data.val_batch_size=1024 rollout.n=8 --count 1024 --jsonl >"$out/samples.jsonl"
python3 scripts/preference_pairs.py "$out/samples.jsonl" "$out/pairs_train.jsonl" "$out/pairs_val.jsonl"
"$ppo" rm --config configs/reverse_rm.yaml critic.init_checkpoint="$sft" data.train_files="[$out/pairs_train.jsonl]" \
  data.val_files="[$out/pairs_val.jsonl]" trainer.output_dir="$out/rm"
"$ppo" export --checkpoint "$out/rm/checkpoints/global_step_150" --out "$out/reward_model" --force
"$ppo" train --config configs/regression_tiny.yaml --config configs/reverse_ppo.yaml actor.init_checkpoint="$sft" \
  reward_model.enable=true reward_model.model.path="$out/reward_model" trainer.output_dir="$out/ppo" \
  trainer.total_training_steps="$steps" "${@:3}"
python3 scripts/rlhf_table.py "$out"
