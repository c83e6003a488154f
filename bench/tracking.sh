#!/usr/bin/env bash
# The trainer's step time with the experiment trackers on against off (docs/tracking.md), side by side in one run: the
# default experiment's PPO (configs/reverse_ppo.yaml over regression_tiny.yaml, from its SFT checkpoint), `pairs`
# times alternately with trainer.logger=[jsonl] and with [jsonl,mlflow,wandb], both trackers offline (an MLflow file
# store, WANDB_MODE=offline) in a temporary folder. Its steps are short (about 0.1 s on 2 cores), so a companion that
# took the trainer's time would show.
# Usage: bench/tracking.sh [pairs [key=value ...]]   (from the repository root, after building and the default
# experiment's `ppo sft`, which writes runs/reverse_sft; default 3 pairs)
# Prints, per run, the median of perf/time_per_step over steps 2..N and the wall time, then the ratio of the medians.
set -euo pipefail
pairs=${1:-3}
[ -d runs/reverse_sft/checkpoints ] || build/ppo sft --config configs/reverse_sft.yaml >/dev/null
out=$(mktemp -d)
trap '[ -n "${PPO_BENCH_KEEP:-}" ] || rm -rf "$out"' EXIT
export MLFLOW_TRACKING_URI="file:$out/mlruns" WANDB_MODE=offline WANDB_DIR="$out" WANDB_SILENT=true
run() {  # name, logger
  local start=$SECONDS
  build/ppo train --config configs/regression_tiny.yaml --config configs/reverse_ppo.yaml trainer.output_dir="$out/$1" \
    "trainer.logger=$2" "${@:3}" >"$out/$1.log" 2>&1 || { cat "$out/$1.log"; exit 1; }
  echo "$1 $((SECONDS - start))" >>"$out/wall.txt"
}
for i in $(seq "$pairs"); do
  run "off_$i" "[jsonl]" "${@:2}"
  run "on_$i" "[jsonl,mlflow,wandb]" "${@:2}"
done
sleep 5  # the last run's companions close their tracked runs after the trainer's exit
python3 - "$out" "$pairs" <<'PY'
import json, statistics, sys
out, pairs = sys.argv[1], int(sys.argv[2])
wall = dict(line.split() for line in open(f"{out}/wall.txt"))
def median(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl") if l.strip()]
    return statistics.median(r["perf/time_per_step"] for r in rows if r.get("training/global_step", 0) >= 2)
off = [median(f"off_{i}") for i in range(1, pairs + 1)]
on = [median(f"on_{i}") for i in range(1, pairs + 1)]
for i in range(pairs):
    print(f"pair {i + 1}: step median off {off[i]:.4f} s ({wall[f'off_{i + 1}']} s wall), "
          f"on {on[i]:.4f} s ({wall[f'on_{i + 1}']} s wall)")
print(f"trackers on / off, median of the runs' step medians: {statistics.median(on) / statistics.median(off):.3f} "
      f"(off {min(off):.4f}-{max(off):.4f} s, on {min(on):.4f}-{max(on):.4f} s)")
for name in ("mlflow", "wandb"):
    states = [json.load(open(f"{out}/on_{i}/tracking/{name}.json")) for i in range(1, pairs + 1)]
    ends = [open(f"{out}/on_{i}/tracking/{name}.closed").read().strip() for i in range(1, pairs + 1)]
    print(f"{name}: runs closed as {sorted(set(ends))}, last step logged {sorted(set(s['step'] for s in states))}")
PY
