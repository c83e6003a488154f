#!/usr/bin/env bash
# On-policy distillation in miniature, on the `reverse` toy task: a teacher trained by README's default experiment
# (the tiny model, 2 layers of width 64, at 1.000 validation accuracy) teaches a student of a quarter of its
# parameters (width 32, same character tokenizer), against RL alone from the same start.
#   1. the teacher: README's two stages (configs/reverse_sft.yaml, then PPO by configs/reverse_ppo.yaml);
#   2. the students' starts: the same short SFT at width 32 ("sft"), and no training at all ("scratch");
#   3. from each start, STEPS steps of configs/reverse_ppo.yaml at width 32 with each signal of MODES:
#        rl                 the task's reward alone (README's PPO: GAE with a critic);
#        reward_gamma1      the teacher's per-token reverse KL as the only reward (distillation.loss_mode
#                           reverse_kl_reward) through the same GAE at algorithm.gamma=1: each token carries the KL
#                           still to come;
#        reward             the same at algorithm.gamma=0 (Thinking Machines' discount of zero);
#        forward_kl_topk    the task's reward and the forward KL on the teacher's 16 most likely tokens of each
#                           position (distillation.use_policy_loss=true);
#        jsd_topk           the same with the generalised JSD (beta 0.5).
# Validation (greedy, 128 held-out prompts, the task's rule) every 10 steps; scripts/distill_table.py makes the table
# (accuracy per step, steps to 0.9).
#   bash scripts/distill_experiment.sh [OUT_DIR [STEPS]]     (default runs/distill, 300; PPO=path/to/ppo,
#   MODES="...", STARTS="sft scratch")
set -euo pipefail
cd "$(dirname "$0")/.."
ppo=${PPO:-build/ppo}
out=${1:-runs/distill}
steps=${2:-300}
modes=${MODES:-rl reward_gamma1 reward forward_kl_topk jsd_topk}
mkdir -p "$out"
student="model.hidden_size=32 model.intermediate_size=64"
if [ ! -d "$out/teacher/checkpoints/global_step_300" ]; then
  "$ppo" sft --config configs/reverse_sft.yaml trainer.output_dir="$out/teacher_sft"
  "$ppo" train --config configs/regression_tiny.yaml --config configs/reverse_ppo.yaml \
    actor.init_checkpoint="$out/teacher_sft/checkpoints/global_step_20" trainer.output_dir="$out/teacher"
fi
teacher="$out/teacher/checkpoints/global_step_300"
# shellcheck disable=SC2086
"$ppo" sft --config configs/reverse_sft.yaml $student trainer.output_dir="$out/student_sft"
for start in ${STARTS:-sft scratch}; do
  init=(actor.init_checkpoint=)  # configs/reverse_ppo.yaml's is the teacher's SFT
  [ "$start" = sft ] && init=(actor.init_checkpoint="$out/student_sft/checkpoints/global_step_20")
  for mode in $modes; do
    case $mode in
    rl) signal=() ;;
    reward_gamma1) signal=(distillation.enable=true distillation.loss_mode=reverse_kl_reward) ;;
    reward) signal=(distillation.enable=true distillation.loss_mode=reverse_kl_reward algorithm.gamma=0) ;;
    *_topk) signal=(distillation.enable=true distillation.loss_mode="$mode" distillation.topk=16 distillation.use_policy_loss=true) ;;
    *) echo "error: unknown mode $mode" >&2 && exit 2 ;;
    esac
    [ "$mode" = rl ] || signal+=(distillation.teacher.model.path="$teacher")
    # shellcheck disable=SC2086
    "$ppo" train --config configs/regression_tiny.yaml --config configs/reverse_ppo.yaml $student "${init[@]}" \
      "${signal[@]}" trainer.total_training_steps="$steps" trainer.test_freq=10 \
      trainer.output_dir="$out/$start-$mode" >"$out/$start-$mode.log"
  done
done
python3 scripts/distill_table.py "$out"
