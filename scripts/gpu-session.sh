#!/usr/bin/env bash
# The whole GPU check in one call of the device tool, inside a deadline (device time is scarce: one call, start
# included, is most of a session's share). Carry gpu-bundle (scripts/gpu-bundle.sh), then:
#   bash scripts/gpu-session.sh [SECONDS]      (default 560; give the call a timeout_s some 30 s above it)
# Steps, most valuable first, each under what is left of the deadline (a step that would start with under 20 s left
# is skipped): the CUDA build (scripts/build-gpu.sh), the [gpu] cases, bench/gpu.sh's decode, train, ppo and plan
# sections, ctest's cpu and mpi labels of the CUDA build, and max-batch. Every log is packed into one file,
# $OUT/gpu-session.tgz (the device tool brings back at most 8 files); the summary lines go to standard output.
set -uo pipefail
cd "$(dirname "$0")/.."
budget=${1:-560}
final=${OUT:-$PWD/build-gpu}
work=$(mktemp -d /tmp/gpu-session.XXXXXX)
export OUT=$work # what build-gpu.sh and bench/gpu.sh write under $OUT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$SECONDS

# step NAME CAP COMMAND...: runs COMMAND into $work/NAME.txt under min(CAP, time left - 20 s); prints its status.
step() {
  local name=$1 cap=$2
  shift 2
  local limit=$((budget - (SECONDS - start) - 20))
  [ "$limit" -gt "$cap" ] && limit=$cap
  if [ "$limit" -lt 20 ]; then
    echo "== $name: skipped, the deadline is near"
    return 1
  fi
  local began=$SECONDS status=0
  timeout -k 5 "$limit" "$@" >"$work/$name.txt" 2>&1 || status=$?
  echo "== $name: exit $status in $((SECONDS - began)) s (limit $limit s)"
  return $status
}
# show NAME PATTERN: the lines of NAME's log that match PATTERN (the summary lines).
show() { grep -E "$2" "$work/$1.txt" | cut -c1-1500 | tail -n "${3:-40}"; }

if step build 330 bash scripts/build-gpu.sh build; then
  step gpu-cases 150 build-gpu/tests/ppo_tests "[gpu]"
  show gpu-cases 'passed|failed|FAILED|with message|WARN|warning' 60
  step decode 200 bash bench/gpu.sh decode
  show decode '^\{|^#'
  step train 60 bash bench/gpu.sh train
  show train '^\{'
  step ppo 150 bash bench/gpu.sh ppo
  show ppo '^\{'
  step ctest-cpu 150 ctest --test-dir build-gpu -L cpu -E '^ref:' -j16 --timeout 120 --output-on-failure
  show ctest-cpu 'tests passed|tests failed|Failed|\*\*\*'
  step plan 100 bash bench/gpu.sh plan
  show plan 'rank|largest|error'
  step ctest-mpi 150 ctest --test-dir build-gpu -L mpi -E '^ref:' -j8 --timeout 120 --output-on-failure
  show ctest-mpi 'tests passed|tests failed|Failed|\*\*\*'
  export MAX_BATCHES="64 256 1024"
  step max-batch 150 bash bench/gpu.sh max-batch
  show max-batch 'largest'
else
  tail -n 40 "$work/build.txt"
  tail -n 30 "$work"/gpu-logs/configure.txt 2>/dev/null
fi
mkdir -p "$final"
tar czf "$final/gpu-session.tgz" -C "$work" . && echo "logs: $final/gpu-session.tgz ($((SECONDS - start)) s in all)"
