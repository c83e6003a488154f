#!/usr/bin/env bash
# A job that restarts itself (torchelastic's and AReaL's recover.mode=auto, for mpirun): runs
#
#   mpirun -np N [--hostfile H] [MPIRUN_ARGS...] PPO train ARGS... trainer.resume_mode=auto
#
# and, when the job ends abnormally, starts it again from its last checkpoint, up to --max-restarts times. Each
# attempt reads the hostfile again and keeps the hosts --host-check accepts, so a host that is gone (or was taken out
# of the file) is left out and the job goes on with fewer ranks: checkpoints reshard to any rank count. Exit status 0
# (done) and 2 (bad input: the same input fails the same way again) end it at once; any other status or a signal is a
# failure to recover from. The binary records each restart in the run folder (restarts.jsonl) and in the metrics
# (elastic/restarts) from the environment the launcher sets (PPO_RESTART_COUNT, PPO_PREVIOUS_EXIT).
#
#   scripts/ppo_elastic.sh [--np N | --hostfile FILE] [--max-restarts K] [--host-check CMD] [--delay S]
#                          [--mpirun-args "ARGS"] [--binary PPO] -- ARGS...
#
#   --np N            ranks on this machine (without --hostfile; default 1)
#   --hostfile FILE   Open MPI hostfile ("node1 slots=8" per line), read again before each attempt; the ranks are
#                     the slots of the hosts kept
#   --host-check CMD  run as `CMD HOST` before each attempt; a host for which it fails is left out (e.g.
#                     "ssh -o ConnectTimeout=5 -o BatchMode=yes" or "ping -c1 -W2"); default: keep every host
#   --max-restarts K  restarts after the first attempt (default 3)
#   --delay S         seconds between an abnormal end and the restart (default 5)
#   --mpirun-args A   more mpirun arguments, one string (e.g. "--oversubscribe --mca ...")
#   --binary PPO      the ppo binary (default: build/ppo beside this script's folder, else `ppo` on PATH)
set -uo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
np=1 hostfile="" host_check="" max_restarts=3 delay=5 mpirun_args="" binary=""
die() {
  echo "error: ppo_elastic: $*" >&2
  exit 2
}
whole() { [[ "$2" =~ ^[0-9]+$ ]] || die "$1 must be a whole number, not '$2'"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --np) [[ $# -ge 2 ]] || die "--np needs a value"; whole --np "$2"; np="$2"; shift 2 ;;
    --hostfile) [[ $# -ge 2 ]] || die "--hostfile needs a value"; hostfile="$2"; shift 2 ;;
    --host-check) [[ $# -ge 2 ]] || die "--host-check needs a value"; host_check="$2"; shift 2 ;;
    --max-restarts) [[ $# -ge 2 ]] || die "--max-restarts needs a value"; whole --max-restarts "$2"; max_restarts="$2"; shift 2 ;;
    --delay) [[ $# -ge 2 ]] || die "--delay needs a value"; whole --delay "$2"; delay="$2"; shift 2 ;;
    --mpirun-args) [[ $# -ge 2 ]] || die "--mpirun-args needs a value"; mpirun_args="$2"; shift 2 ;;
    --binary) [[ $# -ge 2 ]] || die "--binary needs a value"; binary="$2"; shift 2 ;;
    --) shift; break ;;
    *) die "unknown option '$1' (the ppo train arguments come after --)" ;;
  esac
done
[[ $# -gt 0 ]] || die "no ppo train arguments after --"
[[ -z "$hostfile" || -r "$hostfile" ]] || die "--hostfile $hostfile cannot be read"
[[ "$np" -ge 1 ]] || die "--np must be at least 1"
if [[ -z "$binary" ]]; then
  if [[ -x "$here/build/ppo" ]]; then binary="$here/build/ppo"; else binary="$(command -v ppo || true)"; fi
fi
[[ -n "$binary" && -x "$binary" ]] || die "no ppo binary (give --binary)"

# The hosts of the hostfile that pass --host-check, into $1; prints their slots' sum.
kept_hosts() {
  local out="$1" total=0 line host slots
  : >"$out"
  while IFS= read -r line || [[ -n "$line" ]]; do
    line="${line%%#*}"
    read -r host _ <<<"$line"
    [[ -n "${host:-}" ]] || continue
    slots=1
    [[ "$line" =~ slots=([0-9]+) ]] && slots="${BASH_REMATCH[1]}"
    if [[ -n "$host_check" ]] && ! $host_check "$host" >/dev/null 2>&1; then
      echo "ppo_elastic: host $host fails the host check: left out" >&2
      continue
    fi
    echo "$line" >>"$out"
    total=$((total + slots))
  done <"$hostfile"
  echo "$total"
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
status=0
for ((attempt = 0; attempt <= max_restarts; attempt++)); do
  hosts=()
  ranks="$np"
  if [[ -n "$hostfile" ]]; then
    ranks="$(kept_hosts "$work/hosts")"
    [[ "$ranks" -ge 1 ]] || die "no host of $hostfile is left"
    hosts=(--hostfile "$work/hosts")
  fi
  export PPO_RESTART_COUNT="$attempt" PPO_PREVIOUS_EXIT="$status"
  [[ "$attempt" -eq 0 ]] || echo "ppo_elastic: restart $attempt of $max_restarts on $ranks rank(s), from the last checkpoint" >&2
  # shellcheck disable=SC2086  # --mpirun-args is a list of words
  mpirun -np "$ranks" "${hosts[@]}" $mpirun_args "$binary" train "$@" trainer.resume_mode=auto
  status=$?
  if [[ "$status" -eq 0 || "$status" -eq 2 ]]; then exit "$status"; fi
  echo "ppo_elastic: the job ended with status $status" >&2
  [[ "$attempt" -lt "$max_restarts" ]] && sleep "$delay"
done
echo "error: ppo_elastic: the job failed $((max_restarts + 1)) times (last status $status); giving up" >&2
exit "$status"
