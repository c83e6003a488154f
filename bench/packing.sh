#!/usr/bin/env bash
# Packed against padded, and against the eager PyTorch port, side by side in one run (BENCHMARKS.md, "Packed
# sequences"): for each workload (skewed: geometric response lengths with mean R/4, EOS-driven; uniform: every
# response R tokens), $BUILD/bench_update times the training-side phases of a PPO step (old_log_prob, ref, values,
# update_critic, update_actor) with packing off and on in turn on one synthetic batch of configs/bench_memory.yaml's
# shapes, with each phase's share of the machine's GEMM rate; then bench/peers/eager_port.py `phases` runs the same
# phases on the same batch (written by bench_update as JSON) with padded tensors, as PyTorch users write them.
#
#   bash bench/packing.sh [--build build|build-torch2] [--threads 2] [--repeats 5] [--lengths "skewed uniform"]
#                         [--budget TOKENS]
#
# Micro-batches are the config's fixed row counts; --budget TOKENS gives ppo.cpp token-budget micro-batches instead
# (use_dynamic_bsz, as veRL pairs it with remove-padding): TOKENS per update micro-batch, half that per log-prob
# micro-batch, counted as real tokens when packed and as rows x width when padded. The eager port keeps its counts.
# The eager port runs on the LibTorch major version of the build, as in bench/peers.sh: Debian's python3-torch 1.13
# against build/, the reference environment's torch 2.11 against build-torch2/. Every process gets the malloc and
# OpenMP settings ppo applies to itself. Run it on an otherwise idle machine: the header prints the load average.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build threads=2 repeats=5 workloads="skewed uniform" budget=0
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || { echo "error: $1 wants a value (see the header of bench/packing.sh)" >&2; exit 2; }
  case "$1" in
    --build) build=${2%/} ;;
    --threads) threads=$2 ;;
    --repeats) repeats=$2 ;;
    --lengths) workloads=$2 ;;
    --budget) budget=$2 ;;
    *) echo "error: unknown option $1 (see the header of bench/packing.sh)" >&2; exit 2 ;;
  esac
  shift 2
done
case "$build" in
  build-torch2) eager_py=.venv-ref/bin/python ;;
  *) eager_py=/usr/bin/python3 ;;
esac
[ -x "$build/bench_update" ] || { echo "error: $build/bench_update is missing; build it first (docs/building.md)" >&2; exit 2; }
"$eager_py" -c 'import torch' 2>/dev/null || {
  echo "error: $eager_py cannot import torch (bench/peers.sh says how to get it)" >&2
  exit 2
}
export GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-1000}
export MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824 MALLOC_TOP_PAD_=268435456
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "# packing: $build/bench_update against $eager_py bench/peers/eager_port.py phases, $threads threads"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' (+ local changes)')"
echo "# machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), eager torch $("$eager_py" -c 'import torch; print(torch.__version__)')"
echo "# load before: $(uptime)"
budget_overrides=()
if [ "$budget" -gt 0 ]; then
  budget_overrides=(actor.use_dynamic_bsz=true "actor.ppo_max_token_len_per_gpu=$budget" critic.use_dynamic_bsz=true
    "critic.ppo_max_token_len_per_gpu=$budget" rollout.log_prob_use_dynamic_bsz=true
    "rollout.log_prob_max_token_len_per_gpu=$((budget / 2))")
  echo "# ppo.cpp micro-batches by token budget: ${budget_overrides[*]}"
fi
for lengths in $workloads; do
  "$build/bench_update" --threads "$threads" --repeats "$repeats" --lengths "$lengths" \
    --write-batch "$out/batch.json" "${budget_overrides[@]}" > "$out/ours.json"
  "$eager_py" bench/peers/eager_port.py phases --batch "$out/batch.json" --model 8layer --threads "$threads" \
    --repeats "$repeats" > "$out/eager.json"
  echo
  echo "## $lengths"
  echo '```'
  cat "$out/ours.json" "$out/eager.json"
  echo '```'
  python3 - "$out/ours.json" "$out/eager.json" <<'PY'
import json, sys
ours = json.loads(open(sys.argv[1]).read().splitlines()[-1])
eager = json.loads(open(sys.argv[2]).read().splitlines()[-1])
print(f"{ours['rows']} rows, {ours['tokens']} real tokens of {ours['padded_tokens']} padded "
      f"({ours['response_tokens']} response tokens); at::mm at the step's shapes: {ours['gemm_gflops']:.1f} GFLOP/s")
print()
print("| phase | padded (s) | packed (s) | packed / padded speed-up | eager port, padded (s) | packed vs eager | "
      "padded share of GEMM rate | packed share |")
print("|---|---|---|---|---|---|---|---|")
for phase in ("old_log_prob", "ref", "values", "update_critic", "update_actor", "training_s"):
    p, q, e = ours["padded"][phase], ours["packed"][phase], eager["phases"].get(phase, eager.get(phase))
    share = lambda mode: f"{ours[mode + '_gemm_fraction'][phase]:.0%}" if phase != "training_s" else ""
    print(f"| {phase} | {p:.4f} | {q:.4f} | {p / q:.2f}x | {e:.4f} | {e / q:.2f}x (padded {e / p:.2f}x) | "
          f"{share('padded')} | {share('packed')} |")
PY
done
echo
echo "# load after: $(uptime)"
