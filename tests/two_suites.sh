#!/usr/bin/env bash
# Runs the test cases SPEC of the test program twice at once (ctest `two_suites_at_once`): two ctest runs on one
# machine must not collide, so every test takes its temporary paths from TempDir (tests/temp_dir.h), never a fixed
# name. Exit 0 when both runs pass; otherwise the failing run's output.
#   bash tests/two_suites.sh PPO_TESTS SPEC
set -u
tests=$1
spec=$2
# Two programs that each run OpenMP threads share the cores: idle threads must sleep, not spin (LibTorch 2.x's
# libgomp spins by default, which made the pair run minutes instead of seconds).
export OMP_WAIT_POLICY=PASSIVE
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
"$tests" "$spec" >"$logs/a.log" 2>&1 &
first=$!
"$tests" "$spec" >"$logs/b.log" 2>&1 &
second=$!
status=0
wait "$first" || { echo "two_suites: the first run failed:"; cat "$logs/a.log"; status=1; }
wait "$second" || { echo "two_suites: the second run failed:"; cat "$logs/b.log"; status=1; }
[ "$status" = 0 ] && echo "two_suites: both runs of '$spec' passed: $(tail -2 "$logs/a.log" | head -1)"
exit "$status"
