#!/usr/bin/env bash
# Each rank's peak resident set at ZeRO stages 0 and 3 (BENCHMARKS.md, "ZeRO: start-up and resident set").
#   bash bench/zero_rss.sh [RANKS [extra key=value ...]]       defaults: 4 ranks, the bench model widened to 512
#                                                              (model.hidden_size=512 model.intermediate_size=1376)
# Runs `ppo train --config configs/bench_memory.yaml` (actor, critic and reference; 2 steps unless
# trainer.total_training_steps says otherwise) on RANKS ranks at
# parallel.zero_stage 0 and 3, each rank under `/usr/bin/time -f %M` (its peak resident set, KiB), and prints per
# stage: the ranks' peak resident sets, memory/startup_peak_mib (the most the tensors held from the set-up to the
# first step), the largest memory/<phase>_peak_mib metric of the last step (what the tensors held at most,
# workers/memory.h) and the difference, the process's memory that is not tensors.
#   STAGES="3" (default "0 3"): the stages to run.
#   TRACE=1: also each rank's resident set (VmRSS, read from /proc once a second) at its highest in each quarter of
#   the run, to tell a resident set that levels off from one that keeps growing (with trainer.total_training_steps=30).
set -euo pipefail
cd "$(dirname "$0")/.."
ppo=${PPO:-build/ppo}
ranks=${1:-4}
shift || true
extra=(model.hidden_size=512 model.intermediate_size=1376 "$@")
out=$(mktemp -d)
tracer=
trap '[ -z "$tracer" ] || kill "$tracer" 2>/dev/null; rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "| stage | peak resident set per rank, MB | start-up peak, MiB | largest memory metric, MiB (phase) | resident set less metric, MB |"
echo "|---|---|---|---|---|"
for stage in ${STAGES:-0 3}; do
  run="$out/s$stage"
  mkdir -p "$run"
  if [ -n "${TRACE:-}" ]; then  # the ranks are the processes whose command line names this run's output folder
    (
      while sleep 1; do
        line=$SECONDS
        for pid in $(pgrep -f "^$ppo train .*output_dir=$run/out" | sort -n); do
          line="$line $(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)"
        done
        echo "$line" >>"$run/trace"
      done
    ) &
    tracer=$!
  fi
  # shellcheck disable=SC2016
  mpirun --oversubscribe --bind-to none -np "$ranks" \
    sh -c 'exec /usr/bin/time -f %M -o "$0/rss.$OMPI_COMM_WORLD_RANK" "$@"' "$run" "$ppo" train --config configs/bench_memory.yaml trainer.output_dir="$run/out" trainer.resume_mode=disable \
    trainer.num_threads=1 trainer.logger=[jsonl] parallel.zero_stage="$stage" "${extra[@]}" > "$run/log" 2>&1 ||
    { echo "stage $stage failed:" >&2; tail -20 "$run/log" >&2; exit 1; }
  [ -z "$tracer" ] || kill "$tracer"
  python3 - "$stage" "$run" <<'PY'
import glob, json, sys
stage, run = sys.argv[1], sys.argv[2]
rss = [int(open(f).read().split()[-1]) * 1024 / 1e6 for f in sorted(glob.glob(f"{run}/rss.*"))]
lines = [json.loads(l) for l in open(f"{run}/out/metrics.jsonl") if l.strip()]
m, startup = lines[-1], lines[0]["memory/startup_peak_mib"]
peaks = {k[len("memory/"):-len("_peak_mib")]: v for k, v in m.items() if k.endswith("_peak_mib")}
phase = max(peaks, key=peaks.get)
print(f"| {stage} | {', '.join(f'{r:.0f}' for r in rss)} | {startup:.1f} | {peaks[phase]:.1f} ({phase}) | "
      f"{max(rss) - peaks[phase] * 2**20 / 1e6:.0f} |")
PY
  [ -z "${TRACE:-}" ] || python3 - "$stage" "$run/trace" <<'PY'
import sys
stage, path = sys.argv[1], sys.argv[2]
rows = [[int(x) for x in l.split()[1:]] for l in open(path) if len(l.split()) > 1]
ranks = max(len(r) for r in rows)
rows = [r for r in rows if len(r) == ranks]  # samples taken while every rank ran
quarters = [rows[i * len(rows) // 4:(i + 1) * len(rows) // 4] for i in range(4)]
print(f"stage {stage}, resident set per rank at its highest in each quarter of the run ({len(rows)} samples), MB:")
for rank in range(ranks):
    print(f"  rank {rank}: " + ", ".join(f"{max(r[rank] for r in q) * 1024 / 1e6:.0f}" for q in quarters))
PY
done
