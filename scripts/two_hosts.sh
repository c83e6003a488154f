#!/usr/bin/env bash
# Two hosts on one machine: the multi-node path users take with a hostfile, tested without a second machine.
#   bash scripts/two_hosts.sh run [BUILD_DIR]   2 hosts x 1 rank, 3 PPO steps of configs/regression_tiny.yaml; the
#                                               metrics and final parameters must equal a 1-rank run's (the [mpi]
#                                               tests' tolerance, checked by BUILD_DIR/tests/ppo_tests)
#   bash scripts/two_hosts.sh cut [BUILD_DIR]   the link between the hosts cut mid-run: the job must end with a named
#                                               error within parallel.timeout_s (+5 s), leaving no process behind
# BUILD_DIR defaults to build. Exit status 0: passed; 1: failed; 77 (ctest's "skipped"): no network namespaces here
# (they need root with CAP_SYS_ADMIN). ctest runs both modes (label mpi).
#
# Each host is a network namespace with its own hostname (a UTS namespace), joined by a veth pair: host1 10.77.0.1/24,
# host2 10.77.0.2/24, interface ppo0 on both. mpirun starts in host1 with a hostfile of the two addresses, slots=1 each,
# and reaches host2 the way it reaches a real node, through its rsh agent (here `ip netns exec` instead of ssh) which
# starts Open MPI's daemon (orted) there. Both namespaces see the same files, like hosts sharing a network file system.
#
# A stalled rank and a lost host end the job by two different mechanisms:
# - A rank that stops (SIGSTOP, a hung device, a deadlock) while its host stays reachable: the other ranks wait in a
#   collective until parallel.timeout_s, print `error: [rank R] <collective> waited N s ...` and exit; mpirun, which
#   still reaches every daemon, then ends the rest (SIGCONT, SIGTERM, SIGKILL).
# - A lost host or link: Open MPI's daemons notice it only through TCP keepalive on their control connections
#   (oob_tcp_keepalive_time idle seconds, then oob_tcp_keepalive_probes probes every oob_tcp_keepalive_intvl seconds;
#   defaults 300 + 9 x 20 = 480 s). mpirun then prints "ORTE has lost communication with a remote daemon" naming the
#   host, and both sides end their ranks and exit. This must come BEFORE parallel.timeout_s: once the watchdog has
#   ended a rank, mpirun sends the lost daemon a kill order that is never acknowledged, keepalive stops probing a
#   connection with unacknowledged data, and mpirun (and the far daemon) wait until the kernel gives up retransmitting
#   (net.ipv4.tcp_retries2, about 15 minutes). Measured here with oob_tcp_keepalive_time 30: the watchdog's error at
#   10 s, and the job still running 30 s after the cut; with tcp_retries2=5 in both namespaces it ended about 25 s
#   after the cut.
# So with a real hostfile, keep the keepalive window below parallel.timeout_s (the defaults, 480 s < 600 s, do; rank 0
# warns at start-up when it is not, with the options to pass), and name the interface the hosts reach each other on:
#   mpirun --hostfile hosts --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
#     --mca oob_tcp_keepalive_time 20 --mca oob_tcp_keepalive_intvl 5 --mca oob_tcp_keepalive_probes 4 \
#     build/ppo train ... parallel.timeout_s=60        # a lost host ends the job within 20 + 4 x 5 = 40 s
# Keepalive probes are answered by the far kernel, not by the daemon, so a busy or stopped rank never trips them.
# Here: parallel.timeout_s=10 and a keepalive window of 2 + 3 x 1 = 5 s; run takes about 6 s, cut about 9 s (the job
# ends 5-6 s after the cut).
set -euo pipefail
export LC_ALL=C  # a decimal point in $EPOCHREALTIME
cd "$(dirname "$0")/.."
mode=${1:-}
if [ "$mode" != run ] && [ "$mode" != cut ]; then
  echo "usage: bash scripts/two_hosts.sh run|cut [BUILD_DIR]" >&2
  exit 1
fi
build=$(cd "${2:-build}" && pwd)
ppo=$build/ppo
[ -x "$ppo" ] || { echo "two_hosts: no $ppo; build it first" >&2; exit 1; }
mpirun=${MPIEXEC:-mpirun}
timeout_s=10
keepalive=(--mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3)

skip() {
  echo "skipped: $*"
  exit 77
}
fail() {
  echo "two_hosts $mode: FAILED: $*"
  exit 1
}

# Namespaces named after this process, so that concurrent runs (both modes under ctest -j, two build folders) do not
# collide; the addresses repeat, but each pair of namespaces is a network of its own.
host1=ppo-$$-host1
host2=ppo-$$-host2
work=$(mktemp -d /tmp/ppo-two-hosts.XXXXXX)
cleanup() {
  for ns in "$host1" "$host2"; do
    ip netns pids "$ns" 2> /dev/null | xargs -r kill -9 2> /dev/null || true
    ip netns del "$ns" 2> /dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

command -v ip > /dev/null || skip "no ip command (iproute2)"
why=$(ip netns add "$host1" 2>&1) || skip "cannot create a network namespace (root with CAP_SYS_ADMIN needed): $why"
ip netns add "$host2"
ip link add ppo0 netns "$host1" type veth peer name ppo0 netns "$host2"
ip -n "$host1" addr add 10.77.0.1/24 dev ppo0
ip -n "$host2" addr add 10.77.0.2/24 dev ppo0
for ns in "$host1" "$host2"; do
  ip -n "$ns" link set lo up
  ip -n "$ns" link set ppo0 up
done
why=$(ip netns exec "$host1" unshare --uts hostname host1 2>&1) || skip "cannot create a UTS namespace: $why"

# Open MPI's rsh agent: `agent HOST COMMAND` runs COMMAND on HOST, as `ssh HOST COMMAND` would.
cat > "$work/agent" << EOF
#!/bin/sh
case "\$1" in
  10.77.0.1) ns=$host1 name=host1 ;;
  10.77.0.2) ns=$host2 name=host2 ;;
  *) echo "two_hosts agent: unknown host \$1" >&2; exit 255 ;;
esac
shift
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$name && \$*"
EOF
chmod +x "$work/agent"
printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' > "$work/hosts"

# The training of the [mpi] tests (tests/parallel/test_mpi.cpp, train()): 3 steps, eager attention, one thread.
train_args=(train --config configs/regression_tiny.yaml trainer.test_freq=0 trainer.val_before_train=false
  trainer.num_threads=1 model.attn_implementation=eager actor.ppo_micro_batch_size_per_gpu=4
  critic.ppo_micro_batch_size_per_gpu=4 parallel.check_params_freq=1 "parallel.timeout_s=$timeout_s")

# `two_hosts [MPIRUN_OPTION...] COMMAND...`: mpirun in host1 (named host1), one rank on each host, MPI and Open MPI's
# own traffic over ppo0.
two_hosts() {
  ip netns exec "$host1" unshare --uts sh -c 'hostname host1 && exec "$@"' sh \
    "$mpirun" --allow-run-as-root --hostfile "$work/hosts" -np 2 --bind-to none --display-map \
    --mca plm_rsh_agent "$work/agent" --mca btl tcp,self --mca btl_tcp_if_include ppo0 \
    --mca oob_tcp_if_include ppo0 "$@"
}

# Processes left in either host; none may be after the job has ended.
left_running() {
  ip netns pids "$host1"
  ip netns pids "$host2"
}

if [ "$mode" = run ]; then
  start=$SECONDS
  if ! two_hosts "${keepalive[@]}" "$ppo" "${train_args[@]}" trainer.output_dir="$work/two" \
    trainer.total_training_steps=3 > "$work/two.log" 2>&1; then
    cat "$work/two.log"
    fail "the 2-host run failed"
  fi
  # mpirun's map (--display-map) puts one rank on each host.
  grep -q "Data for node: 10.77.0.2" "$work/two.log" || { cat "$work/two.log"; fail "no rank on host2"; }
  # Open MPI notices a lost host within the keepalive window above, 5 s < parallel.timeout_s: no warning. With its
  # default window, 480 s, it would notice only after the watchdog has fired, and rank 0 says so.
  ! grep "^warning: parallel.timeout_s" "$work/two.log" || fail "a warning about the keepalive window"
  two_hosts "$ppo" config --config configs/regression_tiny.yaml parallel.timeout_s=$timeout_s > "$work/config.log" \
    2>&1 || { cat "$work/config.log"; fail "ppo config on 2 hosts failed"; }
  grep -q "^warning: parallel.timeout_s=$timeout_s is not longer than Open MPI takes to notice a lost host (480 s" \
    "$work/config.log" || { cat "$work/config.log"; fail "no warning that a lost host would outlast the watchdog"; }
  two_s=$((SECONDS - start))
  start=$SECONDS
  if ! "$ppo" "${train_args[@]}" trainer.output_dir="$work/one" trainer.total_training_steps=3 > "$work/one.log" \
    2>&1; then
    cat "$work/one.log"
    fail "the 1-rank run failed"
  fi
  one_s=$((SECONDS - start))
  # The comparison of the [mpi] tests: every metric of every step and the final parameters.
  if ! PPO_RUN_A="$work/one" PPO_RUN_B="$work/two" "$build/tests/ppo_tests" --warn NoTests "[.same_runs]"; then
    cat "$work/two.log"
    fail "2 hosts x 1 rank differ from 1 rank"
  fi
  echo "two_hosts run: passed; 2 hosts x 1 rank equal 1 rank (2 hosts ${two_s} s, 1 rank ${one_s} s)"
  exit 0
fi

# cut: a long run; once a step has been logged, host2's end of the link goes down.
log=$work/cut.log
start=$SECONDS
two_hosts "${keepalive[@]}" "$ppo" "${train_args[@]}" trainer.output_dir="$work/cut" trainer.total_training_steps=1000 \
  > "$log" 2>&1 &
job=$!
until [ -s "$work/cut/metrics.jsonl" ]; do
  kill -0 $job 2> /dev/null || { cat "$log"; fail "the run ended before its first step"; }
  [ $((SECONDS - start)) -lt 120 ] || { cat "$log"; fail "no step logged within 120 s"; }
  sleep 0.2
done
ip -n "$host2" link set ppo0 down
cut_at=$EPOCHREALTIME
# A hang must fail the test, not block it: give up at twice the bound.
for _ in $(seq 1 $((4 * (timeout_s + 5)))); do
  kill -0 $job 2> /dev/null || break
  sleep 0.5
done
if kill -0 $job 2> /dev/null; then
  cat "$log"
  fail "the job still runs $((2 * (timeout_s + 5))) s after the link was cut"
fi
status=0
wait $job || status=$?
ended_s=$(awk -v from="$cut_at" -v to="$EPOCHREALTIME" 'BEGIN { printf "%.1f", to - from }')
for _ in $(seq 1 10); do  # the far daemon, which also lost mpirun, ends its rank and itself
  left=$(left_running)
  [ -n "$left" ] || break
  sleep 0.5
done
echo "--- the job's output after its last step:"
grep -v "^step " "$log" | sed -n '/^run directory/,$p' | tail -n +2
echo "---"
[ "$status" != 0 ] || fail "the job exited with status 0"
grep -q "ORTE has lost communication with a remote daemon" "$log" || fail "no error naming the lost host"
grep -q "Remote daemon: .* on node 10.77.0.2" "$log" || fail "the error does not name host 10.77.0.2"
[ -z "$left" ] || { ps -o pid,stat,args -p "$(echo "$left" | paste -sd,)"; fail "processes left running"; }
awk -v t="$ended_s" -v bound=$((timeout_s + 5)) 'BEGIN { exit !(t <= bound) }' ||
  fail "the job ended ${ended_s} s after the cut, more than parallel.timeout_s=$timeout_s + 5 s"
echo "two_hosts cut: passed; the job ended ${ended_s} s after the cut ("parallel.timeout_s=$timeout_s")," \
  "status $status, nothing left"
