#!/usr/bin/env bash
# Exact-match reward for ppo.cpp's reward.command (the protocol is in README.md next to this file).
#
#   reward.command="bash examples/reward/exact_match.sh"
#
# Score 1 when the response, with leading and trailing whitespace removed, equals the ground truth (a string, or
# any other JSON value as its compact JSON text, also trimmed), else 0; "acc" says the same as a bool.
# Needs jq (apt-get install jq). jq reads one request per line and, with --unbuffered, writes and flushes each
# answer as soon as it has read that line: no block buffering, so the trainer never waits on a full buffer.
# A line that is not JSON makes jq exit with an error status, which stops training with that error.
set -euo pipefail

if ! command -v jq >/dev/null 2>&1; then
  echo "exact_match.sh: needs jq (apt-get install jq)" >&2
  exit 127
fi

exec jq --compact-output --unbuffered '
  def trimmed: sub("^\\s+"; "") | sub("\\s+$"; "");
  ((.response // "" | tostring | trimmed)
   == (.ground_truth | if type == "string" then . else tojson end | trimmed)) as $match
  | {score: (if $match then 1 else 0 end), acc: $match}
'
