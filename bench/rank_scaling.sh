#!/usr/bin/env bash
# Weak scaling of PPO steps over MPI ranks on one machine: the same per-rank batch on 1 and 2 ranks.
# Usage: bench/rank_scaling.sh [steps] [prompts_per_rank]   (run from the repository root after building)
# Prints, for each world size, the median over steps 2..N of perf/throughput (tokens / s / device) and
# timing_s/step, read from the run's metrics.jsonl.
set -euo pipefail
steps=${1:-8}
per_rank=${2:-16}
mpirun_flags=(--allow-run-as-root --oversubscribe --bind-to none)
for ranks in 1 2; do
  dir=runs/bench_ranks_$ranks
  rm -rf "$dir"
  batch=$((per_rank * ranks))
  mpirun "${mpirun_flags[@]}" -np "$ranks" build/ppo train --config configs/regression_tiny.yaml \
    trainer.output_dir="$dir" trainer.total_training_steps="$steps" trainer.test_freq=0 \
    trainer.val_before_train=false trainer.write_checkpoints=false trainer.num_threads=1 trainer.log_freq=1000 \
    data.train_batch_size="$batch" actor.ppo_mini_batch_size="$batch" critic.ppo_mini_batch_size="$batch" \
    actor.ppo_micro_batch_size_per_gpu=16 critic.ppo_micro_batch_size_per_gpu=16 >/dev/null
  python3 - "$dir/metrics.jsonl" "$ranks" "$batch" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][1:]  # step 1 warms up
tp = statistics.median(r["perf/throughput"] for r in rows)
st = statistics.median(r["timing_s/step"] for r in rows)
tok = statistics.median(r["perf/total_num_tokens"] for r in rows)
print(f"ranks={sys.argv[2]} prompts/step={sys.argv[3]} tokens/step={tok:.0f} step_s={st:.3f} "
      f"throughput_tokens_per_s_per_device={tp:.0f} total_tokens_per_s={tp*int(sys.argv[2]):.0f}")
PY
done
