#!/usr/bin/env bash
# Peak memory and step time of one PPO step for each memory option (BENCHMARKS.md, "Memory").
#   bash bench/memory.sh [extra key=value ...]      e.g. trainer.num_threads=2
# Runs `ppo train` on configs/bench_memory.yaml (8 layers, 5.83M parameters, actor + critic + reference) for 2 steps
# per row and reads the second step's metrics: memory/<phase>_peak_mib is the most the compute device held during a
# phase (on a CPU-only machine: every CPU tensor except offloaded host state, see workers/memory.h), and
# memory/update_actor_added_mib what the actor update added on top of the state it started with (activations,
# gradients, temporaries).
set -euo pipefail
cd "$(dirname "$0")/.."
ppo=${PPO:-build/ppo}
out=${OUT:-/tmp/ppo_bench_memory}
mkdir -p "$out"
rows=(
  "none|"
  "gradient checkpointing|model.enable_gradient_checkpointing=true"
  "offload param (actor, critic, ref)|actor.offload.param=true critic.offload.param=true ref.offload.param=true"
  "offload grad|actor.offload.grad=true critic.offload.grad=true"
  "offload optimizer|actor.offload.optimizer=true critic.offload.optimizer=true"
  "all of the above|model.enable_gradient_checkpointing=true actor.offload.param=true actor.offload.grad=true actor.offload.optimizer=true critic.offload.param=true critic.offload.grad=true critic.offload.optimizer=true ref.offload.param=true"
  "token budget 768 (dynamic bsz)|actor.use_dynamic_bsz=true actor.ppo_max_token_len_per_gpu=768 critic.use_dynamic_bsz=true critic.ppo_max_token_len_per_gpu=768"
)
echo "| option | peak device MiB (phase) | update_actor peak / added MiB | host state MiB | step s | update_actor s |"
echo "|---|---|---|---|---|---|"
for row in "${rows[@]}"; do
  name=${row%%|*}
  options=${row#*|}
  dir="$out/$(echo "$name" | tr -c 'a-z0-9' '_')"
  # shellcheck disable=SC2086
  "$ppo" train --config configs/bench_memory.yaml trainer.output_dir="$dir" trainer.resume_mode=disable \
    $options "$@" > "$dir.log" 2>&1 || { echo "failed: $name (see $dir.log)" >&2; exit 1; }
  python3 - "$name" "$dir/metrics.jsonl" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
m = [json.loads(l) for l in open(path) if l.strip()][-1]
peaks = {k[len("memory/"):-len("_peak_mib")]: v for k, v in m.items() if k.endswith("_peak_mib")}
phase = max(peaks, key=peaks.get)
print(f"| {name} | {peaks[phase]:.1f} ({phase}) | {m['memory/update_actor_peak_mib']:.1f} / "
      f"{m['memory/update_actor_added_mib']:.1f} | {m['memory/host_state_mib']:.1f} | {m['timing_s/step']:.2f} | "
      f"{m['timing_s/update_actor']:.2f} |")
PY
done
