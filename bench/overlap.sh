#!/usr/bin/env bash
# Rollout ranks against colocated ranks on one machine, side by side in one run: the 8-layer model of
# configs/bench_memory.yaml with longer responses (data.max_response_length), GRPO without a reference, 1 thread a
# rank, and a learning rate so small that the policy stays the initial one: every job samples the same tokens, so
# the jobs do the same work (a policy that learns changes the response lengths, and with them the work of a step).
# Three jobs of 2 ranks each:
#   colocated   2 ranks, each generating and training its half of the batch in turn
#   roles s=0   1 rollout rank + 1 trainer (parallel.rollout_ranks=1), the rollout waiting for each step's weights
#   roles s=1   the same, one step off-policy (async.max_staleness=1): generation overlaps the update
# Usage: bench/overlap.sh [steps [max_response_length [key=value ...]]]   (from the repository root after building;
# defaults 8 and 64; the overrides go to every job, e.g. model.hidden_size=512 model.intermediate_size=1376)
# Prints each job's median over steps 2..N of timing_s/step (the trainers' period, waiting included), of the phases
# it is made of, and the speed-ups. The ideal for the roles at s=1 is max(G, T) per step, where G is the rollout
# rank's generation and reward and T the trainer's step without waiting; colocated ranks take (G + T) / 2 when each
# phase halves on half the batch.
set -euo pipefail
steps=${1:-8}
response=${2:-64}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
trap '[ -n "${PPO_BENCH_KEEP:-}" ] || rm -rf "$out"' EXIT
common=(--config configs/bench_memory.yaml trainer.total_training_steps="$steps" trainer.num_threads=1
        trainer.log_freq=1000 data.max_response_length="$response" model.max_position_embeddings=$((response + 64))
        algorithm.adv_estimator=grpo actor.use_kl_loss=false actor.optim.lr=1e-12 "${@:3}")
run() {  # name, then overrides
  local name=$1
  shift
  mpirun --oversubscribe --bind-to none -np 2 build/ppo train "${common[@]}" trainer.output_dir="$out/$name" "$@" \
    >"$out/$name.log" 2>&1 || { cat "$out/$name.log"; exit 1; }
}
run colocated
run roles_s0 parallel.rollout_ranks=1
run roles_s1 parallel.rollout_ranks=1 async.max_staleness=1
python3 - "$out" <<'PY'
import json, statistics, sys
def median(name, key):
    rows = [json.loads(l) for l in open(f"{sys.argv[1]}/{name}/metrics.jsonl") if l.strip()][1:]  # step 1 warms up
    return statistics.median(r.get(key, 0.0) for r in rows)
phases = ["gen", "reward", "old_log_prob", "update_actor", "weight_sync", "wait_rollout"]
steps = {}
for name in ["colocated", "roles_s0", "roles_s1"]:
    steps[name] = median(name, "timing_s/step")
    parts = " ".join(f"{p}={median(name, 'timing_s/' + p):.3f}" for p in phases)
    print(f"{name:10s} step_s={steps[name]:.3f} tokens={median(name, 'perf/total_num_tokens'):.0f}  {parts}")
g = median("roles_s0", "timing_s/gen") + median("roles_s0", "timing_s/reward")
t = steps["roles_s0"] - median("roles_s0", "timing_s/wait_rollout")
print(f"rollout rank G={g:.3f} s, trainer T={t:.3f} s per step: ideal roles s=1 step max(G, T)={max(g, t):.3f} s, "
      f"colocated (G + T) / 2={(g + t) / 2:.3f} s")
print(f"speed-up roles s=1 over colocated: {steps['colocated'] / steps['roles_s1']:.2f}x "
      f"(ideal {(g + t) / 2 / max(g, t):.2f}x); s=1 over s=0: {steps['roles_s0'] / steps['roles_s1']:.2f}x "
      f"(ideal {(g + t) / max(g, t):.2f}x)")
PY
