#!/usr/bin/env bash
# Validation's decoding: a whole batch in one generation against waves of a few sequences (BENCHMARKS.md,
# "Validation").
#   bash bench/eval_batch.sh [extra key=value ...]
# Runs `ppo eval` of SmolLM2-135M-Instruct (configs/kk_smollm2.yaml; .ref/smollm2-135m-instruct from
# scripts/install-deps.sh) on 48 Knights-and-Knaves puzzles of 2-5 people, greedy, up to 256 response tokens, one
# validation batch: once with rollout.max_num_seqs=8 (8 sequences decode together, a finished one's slot taking the
# next prompt: how validation decoded with the config's rollout.micro_batch_size=8), once with every sequence of the
# batch together (the default). Prints the wall time of each and checks that the two tables are the same.
set -euo pipefail
cd "$(dirname "$0")/.."
ppo=${PPO:-build/ppo}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
args=(eval --config configs/kk_smollm2.yaml data.val_size=48 data.min_difficulty=2 data.max_difficulty=5
      data.max_prompt_length=1024 "$@")
timed() {  # timed NAME ARGS...: runs ppo, prints "NAME seconds"
  local name=$1 start
  shift
  start=$(date +%s.%N)
  "$ppo" "${args[@]}" "$@" >"$out/$name.txt" 2>"$out/$name.err"
  python3 -c "import sys; print(f'{sys.argv[1]:<28} {float(sys.argv[3]) - float(sys.argv[2]):7.1f} s')" \
    "$name" "$start" "$(date +%s.%N)"
}
timed "waves of 8 sequences" rollout.max_num_seqs=8
timed "the whole batch together"
if cmp -s <(sed -n '/^difficulty/,$p' "$out/waves of 8 sequences.txt") \
          <(sed -n '/^difficulty/,$p' "$out/the whole batch together.txt"); then
  echo "tables: the same"
else
  echo "tables differ:"; cat "$out"/*.txt; exit 1
fi
