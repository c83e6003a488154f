#!/usr/bin/env bash
# The whole GPU check in one call of the device tool, inside a deadline (device time is scarce: one call, start
# included, is most of a session's share). Carry gpu-bundle (scripts/gpu-bundle.sh), then:
#   bash scripts/gpu-session.sh [SECONDS [STEP ...]]   (default 560 s; give the call a timeout_s some 30 s above it)
# The CUDA build (scripts/build-gpu.sh, about 160 s on 16 cores) and a report of the test program's library bindings
# come first, then the STEPs in the order given, each under what is left of the deadline (a step that would start
# with under 20 s left is skipped). STEPs: gpu-cases (the [gpu] cases), decode, train, ppo, plan, max-batch
# (bench/gpu.sh's sections), ctest-cpu and ctest-mpi (those labels of the CUDA build); by default all of them, in
# that order. On a machine still warm from an earlier call the build only relinks what changed. Every log is packed
# into one file, $OUT/gpu-session.tgz (the device tool brings back at most 8 files); the summary lines go to standard
# output.
set -uo pipefail
cd "$(dirname "$0")/.."
budget=${1:-560}
shift || true
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(gpu-cases ppo decode train ctest-cpu plan ctest-mpi max-batch)
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
show() { grep -E "$2" "$work/$1.txt" 2>/dev/null | cut -c1-1500 | tail -n "${3:-40}"; }

# bind_report: the order of the test program's libraries, and the case that checks where every libstdc++ call of `ppo`
# and of the test program binds, all bound at start-up (PyPI's libtorch.so exports copies of std::filesystem; a call
# that reached one crashed). A stray binding prints as "symbol -> library".
bind_report() {
  readelf -d build-gpu/tests/ppo_tests | grep NEEDED
  timeout 60 build-gpu/tests/ppo_tests "ppo's and the test program*" -s 2>&1 |
    grep -E "references with|bound to|->|passed|failed|FAILED|exports no" | c++filt | head -60
}

run_step() {
  case $1 in
    gpu-cases)
      step gpu-cases 150 build-gpu/tests/ppo_tests "[gpu]"
      show gpu-cases 'passed|failed|FAILED|with message|WARN|warning|SIG' 60
      ;;
    decode)
      step decode 240 bash bench/gpu.sh decode
      show decode '^\{|^#'
      ;;
    train | ppo)
      step "$1" 150 bash bench/gpu.sh "$1"
      show "$1" '^\{'
      ;;
    plan)
      step plan 120 bash bench/gpu.sh plan
      show plan 'rank|largest|error'
      ;;
    ctest-cpu | ctest-mpi)
      step "$1" 180 ctest --test-dir build-gpu -L "${1#ctest-}" -E '^ref:' -j12 --timeout 120 --output-on-failure
      show "$1" 'tests passed|tests failed|\(Failed|\*\*\*|Timeout' 30
      ;;
    max-batch)
      export MAX_BATCHES=${MAX_BATCHES:-64 256 1024}
      step max-batch 180 bash bench/gpu.sh max-batch
      show max-batch 'largest'
      ;;
    *) echo "== $1: unknown step (gpu-cases decode train ppo plan ctest-cpu ctest-mpi max-batch)" ;;
  esac
}

if step build 330 bash scripts/build-gpu.sh build; then
  bind_report >"$work/bindings.txt" 2>&1
  show bindings 'NEEDED|references|->|passed|failed|FAILED' 30
  for name in "${steps[@]}"; do run_step "$name"; done
else
  tail -n 40 "$work/build.txt"
  tail -n 30 "$work"/gpu-logs/configure.txt 2>/dev/null
fi
mkdir -p "$final"
tar czf "$final/gpu-session.tgz" -C "$work" . && echo "logs: $final/gpu-session.tgz ($((SECONDS - start)) s in all)"
