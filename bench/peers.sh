#!/usr/bin/env bash
# ppo.cpp against its peers, side by side in one run (BENCHMARKS.md, "Peers"):
#   - decoding: $BUILD/bench_generate against an eager PyTorch port of the same decoder and generation loop
#     (bench/peers/eager_port.py generate) and transformers' generate on the same model saved as a HF folder
#     (bench/peers/hf_generate.py), for each model (tiny: ModelConfig's defaults; 8layer: configs/bench_memory.yaml's
#     model) and thread count, at the rollout shape (BATCH rows, PROMPT_LEN prompt tokens, NEW_TOKENS new tokens, no
#     EOS), best of --repeats after a warm-up;
#   - one PPO step on configs/bench_memory.yaml: `$BUILD/ppo train` (median timing_s/step of steps 2..S of its
#     metrics.jsonl) against the eager port's PPO step (eager_port.py ppo-step, same shapes and algorithm).
#
#   bash bench/peers.sh [--build build|build-torch2] [--threads "1 2"] [--repeats 3] [--steps 4]
#                       [--models "tiny 8layer"] [--ppo-model 8layer|tiny|none]
#                       [--batch 64] [--prompt-len 16] [--new-tokens 32]     (or BATCH=, PROMPT_LEN=, NEW_TOKENS=)
#   PEERS_PPO_OVERRIDES="key=value ..." adds overrides to ppo's PPO-step run (e.g. actor.use_remove_padding=false).
#
# The eager port runs on the LibTorch major version of the build: for build/ (Debian's LibTorch 1.13 + OpenBLAS)
# under /usr/bin/python3 with Debian's python3-torch 1.13.1 (the same libtorch and OpenBLAS), for build-torch2/
# (LibTorch 2.11 of the reference environment's torch) under .venv-ref/bin/python. transformers always runs in
# .venv-ref. Every process gets the glibc malloc settings that `ppo` applies to itself at start-up (app/main.cpp,
# mallopt), as MALLOC_*_ variables, so that no side is measured with a worse allocator (PEERS_MALLOC=default: leave
# glibc's defaults to every process except `ppo`, which sets its own). --ppo-model tiny runs the PPO step on the tiny
# shape (a quick check of the harness); none skips it. Run it on an otherwise idle machine: the header and footer
# print the load average.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build threads="1 2" repeats=3 steps=4 models="tiny 8layer" ppo_model=8layer
batch=${BATCH:-64} prompt_len=${PROMPT_LEN:-16} new_tokens=${NEW_TOKENS:-32}
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || { echo "error: $1 wants a value (see the header of bench/peers.sh)" >&2; exit 2; }
  case "$1" in
    --build) build=${2%/} ;;
    --threads) threads=$2 ;;
    --repeats) repeats=$2 ;;
    --steps) steps=$2 ;;
    --models) models=$2 ;;
    --ppo-model) ppo_model=$2 ;;
    --batch) batch=$2 ;;
    --prompt-len) prompt_len=$2 ;;
    --new-tokens) new_tokens=$2 ;;
    *) echo "error: unknown option $1 (see the header of bench/peers.sh)" >&2; exit 2 ;;
  esac
  shift 2
done
case "$ppo_model" in tiny | 8layer | none) ;; *) echo "error: --ppo-model tiny|8layer|none" >&2; exit 2 ;; esac
[ "$steps" -ge 2 ] || { echo "error: --steps must be >= 2 (step 1 is the warm-up)" >&2; exit 2; }
venv=.venv-ref/bin/python
case "$build" in
  build-torch2) eager_py=$venv ;;
  *) eager_py=/usr/bin/python3 ;;
esac
for f in "$build/bench_generate" "$build/ppo"; do
  [ -x "$f" ] || { echo "error: $f is missing; build it first (docs/building.md)" >&2; exit 2; }
done
[ -x "$venv" ] || { echo "error: no reference environment ($venv); run: bash scripts/install-deps.sh" >&2; exit 2; }
if ! "$eager_py" -c 'import torch' 2>/dev/null; then
  if [ "$eager_py" = /usr/bin/python3 ]; then
    echo "error: /usr/bin/python3 cannot import torch; the eager peer of $build/ (LibTorch 1.13) is Debian's" \
      "python3-torch: apt-get install python3-torch" >&2
  else
    echo "error: $eager_py cannot import torch; run: bash scripts/install-deps.sh" >&2
  fi
  exit 2
fi
# ppo re-executes itself with GOMP_SPINCOUNT=1000 (app/spin_wait.cpp); every side gets the same OpenMP waiting.
export GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-1000}
if [ "${PEERS_MALLOC:-tuned}" != default ]; then
  export MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824 MALLOC_TOP_PAD_=268435456
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# run NAME CMD...: runs CMD with its output in $out/NAME.{json,log}; on failure shows the log's end and stops.
run() {
  local name=$1
  shift
  if ! "$@" > "$out/$name.json" 2> "$out/$name.log"; then
    echo "error: failed: $*" >&2
    tail -n 20 "$out/$name.log" "$out/$name.json" >&2
    exit 1
  fi
}
# field FILE KEY: KEY of the last JSON object line of FILE.
field() {
  python3 - "$1" "$2" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1]).read().splitlines() if l.lstrip().startswith("{")]
if not lines:
    sys.exit(f"error: no JSON line in {sys.argv[1]}")
print(json.loads(lines[-1])[sys.argv[2]])
PY
}

# Versions and BLAS of each side.
run version "$build/bench_generate" --batch 1 --prompt-len 2 --new-tokens 1 --repeats 1 --no-recompute --json
ours_torch=$(field "$out/version.json" torch)
if ldd "$build/ppo" | grep -q 'libblas\|openblas'; then ours_blas="OpenBLAS ($(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3))"
else ours_blas="MKL (in libtorch_cpu.so)"; fi
blas_of='import torch; c = torch.__config__.show(); print("MKL" if "BLAS_INFO=mkl" in c else "the system libblas.so.3" if "BLAS_INFO=generic" in c else "?")'
sys_blas="$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo '?')"
echo "# peers: ppo.cpp ($build) against eager PyTorch and transformers"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' (+ local changes)')"
echo "# machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(free -g | awk '/^Mem:/ {print $2}') GiB"
echo "# ppo.cpp: LibTorch $ours_torch, BLAS $ours_blas"
deb=""
[ "$eager_py" = /usr/bin/python3 ] && deb=" (Debian python3-torch $(dpkg-query -W -f '${Version}' python3-torch 2>/dev/null || echo '?'))"
echo "# eager:   $eager_py, torch $("$eager_py" -c 'import torch; print(torch.__version__)')$deb, BLAS $("$eager_py" -c "$blas_of" | sed "s|system libblas.so.3|system libblas.so.3 = $sys_blas|")"
echo "# transformers: $venv, transformers $("$venv" -c 'import transformers; print(transformers.__version__)'), torch $("$venv" -c 'import torch; print(torch.__version__)'), BLAS $("$venv" -c "$blas_of")"
if [ -n "${MALLOC_MMAP_THRESHOLD_:-}" ]; then
  echo "# malloc: MALLOC_MMAP_THRESHOLD_=$MALLOC_MMAP_THRESHOLD_ MALLOC_TRIM_THRESHOLD_=$MALLOC_TRIM_THRESHOLD_" \
    "MALLOC_TOP_PAD_=$MALLOC_TOP_PAD_ for every process (the settings ppo applies to itself with mallopt)"
else
  echo "# malloc: glibc defaults (PEERS_MALLOC=default), except ppo, which applies its mallopt settings"
fi
echo "# load before: $(uptime)"

if [ -n "$models" ]; then
  echo
  echo "## decoding: $batch rows, prompt $prompt_len, $new_tokens new tokens each (no EOS), tokens/s of the best of $repeats"
  echo "# $build/bench_generate [--config configs/bench_memory.yaml] --threads T --batch $batch --prompt-len $prompt_len --new-tokens $new_tokens --repeats $repeats --no-recompute --json"
  echo "# $eager_py bench/peers/eager_port.py generate --model M --threads T (same shape flags)"
  echo "# $venv bench/peers/hf_generate.py --model M --threads T (same shape flags)"
  echo
  echo "| LibTorch | model | threads | ppo.cpp | eager | transformers | ppo.cpp / eager | ppo.cpp / transformers |"
  echo "|---|---|---|---|---|---|---|---|"
  for model in $models; do
    config=()
    case "$model" in
      tiny) ;;
      8layer) config=(--config configs/bench_memory.yaml) ;;
      *) echo "error: --models: tiny or 8layer, not $model" >&2; exit 2 ;;
    esac
    for t in $threads; do
      shape=(--threads "$t" --batch "$batch" --prompt-len "$prompt_len" --new-tokens "$new_tokens" --repeats "$repeats")
      run ours "$build/bench_generate" "${config[@]}" "${shape[@]}" --no-recompute --json
      run eager "$eager_py" bench/peers/eager_port.py generate --model "$model" "${shape[@]}"
      run hf "$venv" bench/peers/hf_generate.py --model "$model" "${shape[@]}"
      python3 - "$out" "$ours_torch" "$model" "$t" <<'PY'
import json, sys
d, version, model, t = sys.argv[1:]
tps = {k: json.loads(open(f"{d}/{k}.json").read().splitlines()[-1])["tokens_per_s"] for k in ("ours", "eager", "hf")}
o, e, h = tps["ours"], tps["eager"], tps["hf"]
print(f"| {version} | {model} | {t} | {o:,.0f} | {e:,.0f} | {h:,.0f} | {o / e:.2f}x | {o / h:.2f}x |")
PY
    done
  done
fi

if [ "$ppo_model" != none ]; then
  overrides=()
  [ "$ppo_model" = tiny ] && overrides=(model.hidden_size=64 model.num_layers=2 model.num_heads=4 model.num_kv_heads=2
    model.intermediate_size=128)
  # shellcheck disable=SC2206  # PEERS_PPO_OVERRIDES: more key=value overrides of ppo's run, split on spaces
  overrides+=(${PEERS_PPO_OVERRIDES:-})
  echo
  echo "## one PPO step, configs/bench_memory.yaml${overrides:+ with ${overrides[*]}} (median of steps 2..$steps)"
  echo "# $build/ppo train --config configs/bench_memory.yaml ${overrides[*]:+${overrides[*]} }trainer.total_training_steps=$steps trainer.num_threads=T trainer.output_dir=TMP trainer.resume_mode=disable"
  echo "# $eager_py bench/peers/eager_port.py ppo-step --model $ppo_model --threads T --steps $steps"
  echo "# tokens: prompt + response tokens per step (perf/total_num_tokens; eager: the same count), mean of steps 2..$steps;"
  echo "# per token: (eager s / eager tokens) / (ppo.cpp s / ppo.cpp tokens), since the two sample different responses"
  echo
  echo "| LibTorch | threads | ppo.cpp step | eager step | ppo.cpp / eager (per step) | (per token) | ppo.cpp phases s | eager phases s |"
  echo "|---|---|---|---|---|---|---|---|"
  for t in $threads; do
    run ppo_train "$build/ppo" train --config configs/bench_memory.yaml "${overrides[@]}" \
      trainer.total_training_steps="$steps" trainer.num_threads="$t" trainer.output_dir="$out/run_$t" \
      trainer.resume_mode=disable
    run eager_step "$eager_py" bench/peers/eager_port.py ppo-step --model "$ppo_model" --threads "$t" --steps "$steps"
    python3 - "$out/run_$t/metrics.jsonl" "$out/eager_step.json" "$ours_torch" "$t" <<'PY'
import json, statistics, sys
metrics, eager_file, version, t = sys.argv[1:]
rows = [json.loads(l) for l in open(metrics) if l.strip()]
rows = [r for r in rows if r.get("training/global_step", 0) >= 2 and "timing_s/step" in r]  # steps 2..S
if not rows:
    sys.exit(f"error: no steps >= 2 in {metrics}")
eager = json.loads(open(eager_file).read().splitlines()[-1])
med = lambda k: statistics.median(r[k] for r in rows)
step = med("timing_s/step")
tokens = statistics.mean(r["perf/total_num_tokens"] for r in rows)
responses = statistics.mean(r["response_length/mean"] for r in rows)
names = {"gen": "generate"}  # ppo.cpp's phase name -> the eager port's
order = ["gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor"]
ours_phases = {k[len("timing_s/"):]: med(k) for k in rows[0] if k.startswith("timing_s/") and k != "timing_s/step"}
fmt = lambda d: ", ".join(f"{k} {d[k]:.3f}" for k in order + sorted(set(d) - set(order)) if k in d)
eager_phases = {next((o for o, e in names.items() if e == k), k): v for k, v in eager["phases"].items()}
per_token = (eager["step_s"] / eager["tokens_per_step"]) / (step / tokens)
print(f"| {version} | {t} | {step:.3f} s ({tokens:,.0f} tokens, response {responses:.1f}) | "
      f"{eager['step_s']:.3f} s ({eager['tokens_per_step']:,.0f} tokens, response "
      f"{eager['response_tokens_per_step'] / eager['rows']:.1f}) | "
      f"{eager['step_s'] / step:.2f}x | {per_token:.2f}x | {fmt(ours_phases)} | {fmt(eager_phases)} |")
PY
  done
fi
echo
echo "# load after: $(uptime)"
