#!/usr/bin/env bash
# ppo.cpp against its peers, side by side in one run (BENCHMARKS.md, "Peers"):
#   - decoding: build/bench_generate against an eager PyTorch port of the same decoder and generation loop
#     (bench/peers/eager_port.py) and transformers' generate on the same shapes saved as a HF folder
#     (bench/peers/hf_generate.py), tiny and 8-layer models, each thread count;
#   - one PPO step on configs/bench_memory.yaml: `ppo train` against the eager port's PPO step.
#
#   bash bench/peers.sh [--build build|build-torch2] [--threads "1 2"] [--repeats 3] [--steps 4]
#
# The eager port runs on the same LibTorch major version as the build: Debian's python3-torch 1.13 (same libtorch
# and OpenBLAS as build/) for build/, the reference environment's torch 2.11 for build-torch2/. transformers runs in
# the reference environment. Shapes: BATCH rows, PROMPT_LEN prompt tokens, NEW_TOKENS new tokens (environment).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build threads="1 2" repeats=3 steps=4
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "error: unknown option $1 (see the header of bench/peers.sh)" >&2; exit 2 ;;
  esac
done
batch=${BATCH:-64} prompt_len=${PROMPT_LEN:-16} new_tokens=${NEW_TOKENS:-32}
venv=.venv-ref/bin/python
if [ "$build" = build-torch2 ]; then eager_py=$venv; else eager_py=/usr/bin/python3; fi
for f in "$build/bench_generate" "$build/ppo"; do
  [ -x "$f" ] || { echo "error: $f is missing; build it first (README, Building)" >&2; exit 2; }
done
"$eager_py" -c 'import torch' 2>/dev/null ||
  { echo "error: $eager_py has no torch; for build/ run: apt-get install python3-torch" >&2; exit 2; }
[ -x "$venv" ] || { echo "error: no reference environment; run: bash scripts/install-deps.sh" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

field() { python3 -c "import json,sys; print(json.loads(sys.stdin.readlines()[-1])['$1'])"; }

echo "# peers: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), build $build"
echo "# ppo.cpp LibTorch $("$build/bench_generate" --new-tokens 1 --batch 1 --repeats 1 --no-recompute --json |
  field torch); eager port torch $("$eager_py" -c 'import torch; print(torch.__version__)'); transformers $(
  "$venv" -c 'import transformers; print(transformers.__version__)') on torch $("$venv" -c 'import torch; print(torch.__version__)')"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "## decoding: $batch rows, prompt $prompt_len, $new_tokens new tokens (no EOS), best of $repeats"
echo "| model | threads | ppo.cpp tokens/s | eager tokens/s | transformers tokens/s | ppo.cpp / eager | ppo.cpp / transformers |"
echo "|---|---|---|---|---|---|---|"
for model in tiny 8layer; do
  config=()
  [ "$model" = 8layer ] && config=(--config configs/bench_memory.yaml)
  for t in $threads; do
    shape=(--threads "$t" --batch "$batch" --prompt-len "$prompt_len" --new-tokens "$new_tokens" --repeats "$repeats")
    ours=$("$build/bench_generate" "${config[@]}" "${shape[@]}" --no-recompute --json | field tokens_per_s)
    eager=$("$eager_py" bench/peers/eager_port.py generate --model "$model" "${shape[@]}" | field tokens_per_s)
    hf=$("$venv" bench/peers/hf_generate.py --model "$model" "${shape[@]}" 2>/dev/null | field tokens_per_s)
    python3 -c "o, e, h = $ours, $eager, $hf; print(f'| $model | $t | {o:,.0f} | {e:,.0f} | {h:,.0f} | {o / e:.2f}x | {o / h:.2f}x |')"
  done
done
echo
echo "## one PPO step, configs/bench_memory.yaml (median of steps 2..$steps)"
echo "| threads | ppo.cpp step s | eager step s | ppo.cpp / eager (per step) | ppo.cpp / eager (per token) | ppo.cpp phases s | eager phases s |"
echo "|---|---|---|---|---|---|---|"
for t in $threads; do
  run="$out/ppo_$t"
  "$build/ppo" train --config configs/bench_memory.yaml trainer.total_training_steps="$steps" trainer.num_threads="$t" \
    trainer.output_dir="$run" trainer.resume_mode=disable > "$out/ppo_$t.log" 2>&1 ||
    { echo "error: ppo train failed, see below" >&2; tail -5 "$out/ppo_$t.log" >&2; exit 1; }
  "$eager_py" bench/peers/eager_port.py ppo-step --threads "$t" --steps "$steps" > "$out/eager_$t.json"
  python3 - "$run/metrics.jsonl" "$out/eager_$t.json" "$t" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][1:]
eager = json.loads(open(sys.argv[2]).read().splitlines()[-1])
med = lambda k: statistics.median(r[k] for r in rows)
ours_step = med("timing_s/step")
tokens = statistics.mean(r["response_length/mean"] + r["prompt_length/mean"] for r in rows) * 64
phases = {k: med("timing_s/" + k) for k in ("gen", "old_log_prob", "ref", "values", "update_actor", "update_critic")}
per_token = (eager["step_s"] / eager["tokens_per_step"]) / (ours_step / tokens)
fmt = lambda d: ", ".join(f"{k} {v:.2f}" for k, v in d.items())
print(f"| {sys.argv[3]} | {ours_step:.2f} ({tokens:.0f} tokens) | {eager['step_s']:.2f} ({eager['tokens_per_step']:.0f} tokens) | "
      f"{eager['step_s'] / ours_step:.2f}x | {per_token:.2f}x | {fmt(phases)} | {fmt(eager['phases'])} |")
PY
done
echo
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
