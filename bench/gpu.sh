#!/usr/bin/env bash
# The GPU benchmarks of issue 15, side by side in one run, on Qwen2.5-0.5B's shape (configs/bench_qwen2.5-0.5b.yaml,
# random weights, bfloat16): decoding (ppo.cpp's bench_generate against transformers' generate with its dynamic cache,
# its static cache, and its static cache with torch.compile, and against the bandwidth floor), then one PPO step per
# memory option with its phase times and peak memory. Run after scripts/build-gpu.sh, on the CUDA machine:
#   [BUILD=build-gpu] [BATCH=64] [PROMPT_LEN=16] [NEW_TOKENS=256] bash bench/gpu.sh
# Results go to $OUT/gpu-bench (else build-gpu/gpu-bench): one JSON line per side, and each PPO run's metrics.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build-gpu} batch=${BATCH:-64} prompt_len=${PROMPT_LEN:-16} new_tokens=${NEW_TOKENS:-256}
python=${PYTHON:-python3}
out=${OUT:-$build}/gpu-bench
mkdir -p "$out"
eval "$(bash scripts/build-gpu.sh env)"
shape=(--batch "$batch" --prompt-len "$prompt_len" --new-tokens "$new_tokens")

echo "# decode: batch $batch, prompt $prompt_len, $new_tokens new tokens, bfloat16" | tee "$out/decode.jsonl"
"$build/bench_generate" --config configs/bench_qwen2.5-0.5b.yaml --device cuda "${shape[@]}" --repeats 3 \
  --no-recompute --json | tee -a "$out/decode.jsonl"
for cache in dynamic static compiled; do
  "$python" bench/gpu/hf_decode.py --cache "$cache" "${shape[@]}" --repeats 3 2>"$out/hf_$cache.err" |
    tee -a "$out/decode.jsonl" || echo "{\"impl\": \"transformers\", \"cache\": \"$cache\", \"failed\": true}" |
    tee -a "$out/decode.jsonl"
done
"$python" bench/gpu/hf_decode.py --floor "${shape[@]}" | tee -a "$out/decode.jsonl"

# One PPO step (after one warm-up step) on the same shape per memory option: phase times, throughput, peak memory.
declare -A options=(
  [none]=""
  [checkpointing]="model.enable_gradient_checkpointing=true"
  [offload]="actor.offload.param=true actor.offload.grad=true actor.offload.optimizer=true critic.offload.param=true critic.offload.grad=true critic.offload.optimizer=true ref.offload.param=true"
)
for name in none checkpointing offload; do
  dir=/tmp/ppo_gpu_bench_$name
  rm -rf "$dir"
  # shellcheck disable=SC2086
  "$build/ppo" train --config configs/regression_tiny.yaml --config configs/bench_qwen2.5-0.5b.yaml \
    trainer.output_dir="$dir" trainer.total_training_steps=2 trainer.test_freq=0 trainer.val_before_train=false \
    trainer.save_freq=0 actor.use_kl_loss=true ${options[$name]} >"$out/ppo_$name.log" 2>&1 ||
    echo "ppo step with $name failed: see $out/ppo_$name.log"
  [ -f "$dir/metrics.jsonl" ] && cp "$dir/metrics.jsonl" "$out/ppo_$name.metrics.jsonl"
  "$python" - "$dir/metrics.jsonl" "$name" <<'EOF' || true
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
last = rows[-1]
keys = sorted(k for k in last if k.startswith("timing_s/")) + ["perf/throughput", "perf/max_memory_allocated_gb"]
print(json.dumps({"option": sys.argv[2], **{k: last.get(k) for k in keys}}))
EOF
done | tee "$out/ppo_step.jsonl"
