#!/usr/bin/env bash
# Routing replay on a tiny mixture-of-experts policy (docs/hugging-face.md, "Routing replay"): GRPO on the reverse
# task of configs/regression_tiny.yaml (2 mini-batches a step) with 8 experts of SwiGLU 64 in both layers, top-2
# (model.model_type=mixtral), actor.router_replay=disabled against R3, at actor.ppo_epochs 1 and 2 (the later
# mini-batches' forwards run on weights the earlier ones moved). Per run, means over its steps:
# training/rollout_probs_diff_max (the step's largest |exp(old log-prob) - exp(rollout log-prob)|), actor/ppo_kl,
# actor/pg_clipfrac, and under R3 the share of (token, MoE layer) pairs whose router would have chosen other experts
# than the rollout's: in the old log-prob forward (moe/routing_mismatch) and in the update's (_update); and the reward
# of the last 5 steps.
# Usage: bash scripts/moe_replay_experiment.sh [steps]    (from the repository root after building; default 20)
set -euo pipefail
steps=${1:-20}
ppo=${PPO:-build/ppo}
out=$(mktemp -d)
trap '[ -n "${PPO_KEEP:-}" ] || rm -rf "$out"' EXIT
moe="model.model_type=mixtral model.moe.num_experts=8 model.moe.num_experts_per_tok=2 model.moe.intermediate_size=64"
for epochs in 1 2; do
  for replay in disabled R3; do
    name="e${epochs}_$replay"
    # shellcheck disable=SC2086
    "$ppo" train --config configs/regression_tiny.yaml trainer.output_dir="$out/$name" trainer.logger=[jsonl] \
      trainer.total_training_steps="$steps" trainer.test_freq=0 trainer.val_before_train=false \
      trainer.write_checkpoints=false algorithm.adv_estimator=grpo actor.ppo_epochs="$epochs" \
      actor.router_replay=$replay trainer.num_threads=2 $moe >"$out/$name.log" 2>&1 || { cat "$out/$name.log"; exit 1; }
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
def mean(rows, key, fmt):
    values = [r[key] for r in rows if key in r]
    return format(statistics.mean(values), fmt) if values else "-"
print("| ppo_epochs | router_replay | rollout_probs_diff_max | ppo_kl | pg_clipfrac | mismatch, old log-probs | "
      "mismatch, update | reward, last 5 steps |")
print("|---|---|---|---|---|---|---|---|")
for epochs in (1, 2):
    for replay in ("disabled", "R3"):
        rows = [json.loads(l) for l in open(f"{out}/e{epochs}_{replay}/metrics.jsonl") if l.strip()]
        rows = [r for r in rows if "actor/ppo_kl" in r]
        print(f"| {epochs} | {replay} | {mean(rows, 'training/rollout_probs_diff_max', '.3g')} | "
              f"{mean(rows, 'actor/ppo_kl', '.3g')} | {mean(rows, 'actor/pg_clipfrac', '.4f')} | "
              f"{mean(rows, 'moe/routing_mismatch', '.3%')} | {mean(rows, 'moe/routing_mismatch_update', '.3%')} | "
              f"{mean(rows[-5:], 'critic/score/mean', '.3f')} |")
PY
