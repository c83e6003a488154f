#!/usr/bin/env bash
# The GPU benchmarks, side by side in one run, on Qwen2.5-0.5B's shape (configs/bench_qwen2.5-0.5b.yaml,
# random weights, bfloat16). Run after scripts/build-gpu.sh, on the CUDA machine:
#   [BUILD=build-gpu] [BATCH=64] [PROMPT_LEN=16] [NEW_TOKENS=256] bash bench/gpu.sh [SECTION ...]
# Sections (default: decode train ppo; max-batch takes minutes of its own, run it in a call of its own):
#   decode     ppo.cpp's bench_generate (BATCH and 256 rows, CUDA graphs on and off) against transformers' generate
#              with its dynamic cache, its static cache, and its static cache with torch.compile (each under
#              HF_TIMEOUT seconds, default 120), and against the bandwidth floor (BATCH rows, NEW_TOKENS tokens); the
#              ATen ops of one decode step (--count-ops); the Kineto profile of ppo.cpp's decoding, graphs on and off
#              (bench_generate --profile), and Nsight Systems' summaries where nsys is on the PATH
#   train      the training forward and backward: bench_generate --train against the same work in PyTorch eager
#              (transformers' Qwen2), TRAIN_BATCH rows (default 16) of PROMPT_LEN + NEW_TOKENS tokens
#   ppo        one PPO step (after one warm-up step) per memory option, with float32 parameters under bfloat16
#              autocast, and with LoRA (rank 8 on the actor and critic): phase times, throughput, peak memory; 16 prompts x 4 responses of up to PPO_RESPONSE tokens
#              (default 256)
#   plan       ppo plan's per-phase prediction against the caching allocator's peaks (bench/plan_check.py on
#              configs/bench_memory.yaml, ZeRO stages 0-3 on 1, 2 and 4 ranks sharing the GPU)
#   max-batch  per memory option, the largest micro-batch (MAX_BATCHES, doubling, default 16 ... 1024 sequences of
#              PPO_RESPONSE tokens, one response per prompt, micro = mini = whole batch) whose PPO step runs
# Results go to $OUT/gpu-bench (else build-gpu/gpu-bench): one JSON line per side, and each PPO run's log and
# metrics.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build-gpu} batch=${BATCH:-64} prompt_len=${PROMPT_LEN:-16} new_tokens=${NEW_TOKENS:-256}
train_batch=${TRAIN_BATCH:-16} response=${PPO_RESPONSE:-256}
python=${PYTHON:-python3}
out=${OUT:-$build}/gpu-bench
mkdir -p "$out"
eval "$(bash scripts/build-gpu.sh env)"
sections=("$@")
[ ${#sections[@]} -gt 0 ] || sections=(decode train ppo)
model=configs/bench_qwen2.5-0.5b.yaml

decode() {
  local shape=(--batch "$batch" --prompt-len "$prompt_len" --new-tokens "$new_tokens")
  echo "# decode: batch $batch (and 256), prompt $prompt_len, $new_tokens new tokens, bfloat16; CUDA graphs on, then off"
  for rows in "$batch" 256; do
    for graphs in "" --no-cuda-graphs; do
      "$build/bench_generate" --config $model --device cuda --batch "$rows" --prompt-len "$prompt_len" \
        --new-tokens "$new_tokens" --repeats 3 --no-recompute --json $graphs ||
        echo "{\"impl\": \"ppo.cpp\", \"batch\": $rows, \"failed\": true}"
    done
  done
  # The ATen ops of one decode step (eager steps: a graph's replay runs none).
  "$build/bench_generate" --config $model --device cuda --batch "$batch" --prompt-len "$prompt_len" --new-tokens 8 \
    --repeats 1 --no-recompute --json --no-cuda-graphs --count-ops | grep '"mode":"ops"' ||
    echo '{"impl": "ppo.cpp", "mode": "ops", "failed": true}'
  "$python" bench/gpu/hf_decode.py --floor "${shape[@]}"
  # Where the decode time goes: LibTorch's Kineto profiler over a generation of 64 tokens (kernel time against wall
  # time, runtime calls, the costliest kernels and ops), graphs on and off, and Nsight Systems' summaries when nsys is
  # installed.
  for graphs in "" --no-cuda-graphs; do
    "$build/bench_generate" --config $model --device cuda --batch "$batch" --prompt-len "$prompt_len" \
      --new-tokens 64 --repeats 1 --no-recompute --json --profile $graphs | grep '"mode":"profile"' ||
      echo '{"impl": "ppo.cpp", "mode": "profile", "failed": true}'
  done
  if command -v nsys >/dev/null; then
    nsys profile --stats=true --force-overwrite=true -o "$out/decode_nsys" "$build/bench_generate" --config $model \
      --device cuda --batch "$batch" --prompt-len "$prompt_len" --new-tokens 32 --repeats 1 --no-recompute \
      >"$out/decode_nsys.txt" 2>&1 || echo "nsys failed: see $out/decode_nsys.txt" >&2
    rm -f "$out"/decode_nsys.nsys-rep "$out"/decode_nsys.sqlite
  fi
  # transformers last, the compiled cache (torch.compile's first compilation takes minutes) under a time limit.
  for cache in dynamic static compiled; do
    timeout -k 5 "${HF_TIMEOUT:-120}" "$python" bench/gpu/hf_decode.py --cache "$cache" "${shape[@]}" --repeats 2 \
      2>"$out/hf_$cache.err" || echo "{\"impl\": \"transformers\", \"cache\": \"$cache\", \"failed\": true}"
  done
}

train() {
  local shape=(--batch "$train_batch" --prompt-len "$prompt_len" --new-tokens "$new_tokens" --repeats 3)
  echo "# train: forward + backward, $train_batch x $((prompt_len + new_tokens)) tokens, bfloat16"
  "$build/bench_generate" --config $model --device cuda --train "${shape[@]}" --json ||
    echo '{"impl": "ppo.cpp", "mode": "train", "failed": true}'
  "$python" bench/gpu/hf_decode.py --train "${shape[@]}" 2>"$out/hf_train.err" ||
    echo '{"impl": "pytorch-eager", "mode": "train", "failed": true}'
}

declare -A options=(
  [none]=""
  [checkpointing]="model.enable_gradient_checkpointing=true"
  [offload]="actor.offload.param=true actor.offload.grad=true actor.offload.optimizer=true critic.offload.param=true critic.offload.grad=true critic.offload.optimizer=true ref.offload.param=true"
  [fp32_autocast]="model.dtype=float32 model.autocast_dtype=bfloat16"
  [lora]="actor.lora.rank=8 actor.lora.alpha=16 critic.lora.rank=8 critic.lora.alpha=16"
)

# ppo_step NAME DIR STEPS OVERRIDES...: one run of `ppo train` on the benchmark shape; its log and metrics go to $out.
ppo_step() {
  local name=$1 dir=$2 steps=$3
  shift 3
  rm -rf "$dir"
  local status=0
  "$build/ppo" train --config configs/regression_tiny.yaml --config $model trainer.output_dir="$dir" \
    trainer.total_training_steps="$steps" trainer.test_freq=0 trainer.val_before_train=false trainer.save_freq=0 \
    "trainer.logger=[console,jsonl]" actor.use_kl_loss=true data.max_response_length="$response" "$@" \
    >"$out/$name.log" 2>&1 || status=$?
  [ -f "$dir/metrics.jsonl" ] && cp "$dir/metrics.jsonl" "$out/$name.metrics.jsonl"
  rm -rf "$dir"
  return $status
}

# summary NAME: the last step's phase times, throughput and peak memory, as one JSON line.
summary() {
  "$python" - "$out/$1.metrics.jsonl" "$1" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
last = rows[-1]
keys = sorted(k for k in last if k.startswith("timing_s/")) + ["perf/throughput", "perf/max_memory_allocated_gb"]
print(json.dumps({"run": sys.argv[2], "step": last.get("training/global_step"), **{k: last.get(k) for k in keys}}))
EOF
}

ppo() {
  echo "# ppo: one step after a warm-up step, 16 prompts x 4 responses, up to $response response tokens"
  for name in none checkpointing offload fp32_autocast lora; do
    # shellcheck disable=SC2086
    if ppo_step "ppo_$name" "/tmp/ppo_gpu_bench_$name" 2 ${options[$name]}; then
      summary "ppo_$name"
    else
      echo "{\"run\": \"ppo_$name\", \"failed\": true}"
    fi
  done
}

max_batch() {
  echo "# max-batch: the largest micro-batch of $response-token responses whose PPO step runs, per memory option"
  for name in none checkpointing offload lora; do
    local fits=0
    for m in ${MAX_BATCHES:-16 32 64 128 256 512 1024}; do
      # shellcheck disable=SC2086
      if ppo_step "max_${name}_$m" "/tmp/ppo_gpu_max_$name" 1 ${options[$name]} rollout.n=1 \
        data.train_batch_size="$m" actor.ppo_mini_batch_size="$m" critic.ppo_mini_batch_size="$m" \
        actor.ppo_micro_batch_size_per_gpu="$m" critic.ppo_micro_batch_size_per_gpu="$m" \
        rollout.log_prob_micro_batch_size_per_gpu="$m" ref.log_prob_micro_batch_size_per_gpu="$m" \
        rollout.micro_batch_size="$m"; then
        fits=$m
        summary "max_${name}_$m"
      else
        echo "{\"run\": \"max_${name}_$m\", \"failed\": true, \"error\": $(grep -m1 '^error:' "$out/max_${name}_$m.log" |
          head -c 300 | "$python" -c 'import json, sys; print(json.dumps(sys.stdin.read().strip()))')}"
        break
      fi
    done
    echo "{\"option\": \"$name\", \"largest_micro_batch\": $fits}"
  done
}

plan() {
  echo "# plan: ppo plan against memory/<phase>_peak_mib on CUDA"
  PPO=$build/ppo "$python" bench/plan_check.py configs/bench_memory.yaml
}

for section in "${sections[@]}"; do
  case $section in
    decode | train | ppo) $section | tee "$out/$section.jsonl" ;;
    plan) plan | tee "$out/plan.txt" ;;
    max-batch) max_batch | tee "$out/max_batch.jsonl" ;;
    *)
      echo "error: unknown section '$section' (decode, train, ppo, plan, max-batch)" >&2
      exit 2
      ;;
  esac
done
