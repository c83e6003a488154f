#!/usr/bin/env bash
# Logic-puzzle experiment: Knights and Knaves with the Logic-RL reward on a small character-level
# transformer, on CPU. Held-out data -> SFT warm start -> eval -> RL from the SFT checkpoint -> eval -> SVG curves.
#
#   bash scripts/kk_experiment.sh [--quick] [--algo grpo|ppo] [--sft-from DIR] [--ppo build/ppo] [--out DIR]
#
#   --quick   a reduced run (tiny model, a few steps; under a minute) that exercises every stage; the CLI test uses it
#   --algo    grpo (default: configs/kk_grpo.yaml, no critic) or ppo (configs/kk_ppo.yaml: GAE; the critic's
#             backbone starts from the SFT policy, exported with `ppo export` and loaded through model.path)
#   --sft-from  an earlier run folder of this script: its data and SFT checkpoint are reused (data and SFT are
#             skipped), e.g. to compare RL algorithms from one SFT checkpoint; pass the same --quick as that run
#   --ppo     the ppo binary (default: $PPO or build/ppo)
#   --out     run folder (default runs/kk_experiment, or runs/kk_quick with --quick); it is replaced
#
# Sizes can be changed with environment variables: KK_TRAIN_SEEDS (training data seeds, 300 + 250 puzzles each),
# KK_SFT_EPOCHS, KK_RL_STEPS (default: the configs' trainer.total_epochs and total_training_steps), KK_THREADS;
# KK_TRACE=1 makes the reference answers reason in the think block (kk_prepare.py --trace), KK_TRACE=local atom by
# atom (--trace local). Writes to the run folder:
#   data/{train,val,test}.jsonl   puzzles, disjoint by quiz text and by logical structure (scripts/kk_prepare.py)
#   sft/, rl/                     run directories (config.yaml, metrics.jsonl, checkpoints/)
#   eval_sft.txt, eval_rl.txt     accuracy per number of people on the test puzzles (greedy decoding)
#   pass_sft.txt, pass_rl.txt     pass@1 and pass@k (KK_PASSK samples per puzzle, default 8; 0 = skip) at temperature 1
#   results.md                    the two tables side by side, data sizes and wall times
#   plots/*.svg                   SFT loss, training score and accuracy per RL step, validation accuracy
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ppo=${PPO:-$root/build/ppo}
algo=grpo
quick=0
out=""
sft_from=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --algo) algo=$2; shift ;;
    --ppo) ppo=$2; shift ;;
    --out) out=$2; shift ;;
    --sft-from) sft_from=$2; shift ;;
    -h|--help) sed -n '2,/^$/{/^#/p}' "$0"; exit 0 ;;
    *) echo "error: unknown argument '$1' (valid: --quick, --algo grpo|ppo, --sft-from DIR, --ppo BINARY, --out DIR)" >&2
       exit 2 ;;
  esac
  shift
done
case "$algo" in
  grpo|ppo) ;;
  *) echo "error: --algo '$algo' is not supported; valid: grpo, ppo" >&2; exit 2 ;;
esac
[ -x "$ppo" ] || { echo "error: no ppo binary at $ppo (build it, or pass --ppo / set PPO)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "error: python3 is needed for the data split and the plots" >&2; exit 2; }
latest_checkpoint() {  # latest_checkpoint RUN_DIR: its newest checkpoints/global_step_N folder
  ls -d "$1"/checkpoints/global_step_* | sort -V | tail -n 1
}
if [ -n "$sft_from" ]; then
  sft_from=$(cd "$sft_from" 2>/dev/null && pwd) || { echo "error: --sft-from: no folder $sft_from" >&2; exit 2; }
  if [ ! -e "$sft_from/.kk_experiment" ] || [ ! -f "$sft_from/eval_sft.txt" ] ||
     [ -z "$(latest_checkpoint "$sft_from/sft" 2>/dev/null)" ]; then
    echo "error: --sft-from $sft_from is not a kk_experiment.sh run with an SFT checkpoint and its eval" >&2
    exit 2
  fi
fi

if [ "$quick" = 1 ]; then
  out=${out:-runs/kk_quick}
  train_seeds=${KK_TRAIN_SEEDS:-1}
  train_counts="30 30"  # 2-people and 3-people puzzles per training seed, before the held-out filter
  test_counts="12 12"  # 2-people and 3-people test puzzles generated (repeated structures are dropped)
  val_counts="4 4"
  sft_epochs=${KK_SFT_EPOCHS:-1}
  rl_steps=${KK_RL_STEPS:-2}
  # A tiny model and small batches: exercises every stage, learns nothing.
  common=(model.hidden_size=32 model.num_layers=1 model.intermediate_size=64 data.val_batch_size=32
          data.max_response_length=112)
  sft_extra=(data.train_batch_size=8 actor.ppo_mini_batch_size=8 actor.ppo_micro_batch_size_per_gpu=8
             trainer.test_freq=3)
  rl_extra=(data.train_batch_size=4 actor.ppo_mini_batch_size=4 critic.ppo_mini_batch_size=4 rollout.n=2
            actor.ppo_micro_batch_size_per_gpu=8 critic.ppo_micro_batch_size_per_gpu=8 trainer.test_freq=2)
else
  out=${out:-runs/kk_experiment}
  train_seeds=${KK_TRAIN_SEEDS:-1 2 3 4 5 6}
  # 2-people puzzles have few distinct structures (95 up to renaming in 12,057 generated), so each seed draws more
  # of them: the same structures come back with other names and phrasings, which keeps 2 and 3 people balanced
  # (the training split has 922 2-people and 1,434 3-people puzzles).
  train_counts="300 250"
  # 45 2-people puzzles drawn for test (35 distinct) and 12 for validation (7 more) leave 53 of the 95 structures
  # for training. 3-people structures are plentiful: 315 drawn leave 305 test puzzles after the repeats are dropped,
  # at least the 300 per group that keep the accuracy's 95% interval near +-4 points.
  test_counts="45 315"
  val_counts="12 48"
  sft_epochs=${KK_SFT_EPOCHS:-}
  rl_steps=${KK_RL_STEPS:-}
  common=()
  sft_extra=()
  rl_extra=()
fi
threads=${KK_THREADS:-2}
common+=(trainer.num_threads="$threads")
prepare_extra=()
if [ "${KK_TRACE:-0}" = local ]; then
  # Answers reason atom by atom and stop at the solution (kk_prepare.py --trace local), up to about 470 characters;
  # a wider model (529,664 parameters) for the longer sequences.
  prepare_extra=(--trace local)
  common+=(data.max_response_length=512 model.max_position_embeddings=928 model.hidden_size=128
           model.intermediate_size=320)
elif [ "${KK_TRACE:-0}" = 1 ]; then
  # Answers reason first: a case analysis over every assignment (kk_prepare.py --trace), up to 220 characters.
  prepare_extra=(--trace)
  common+=(data.max_response_length=232 model.max_position_embeddings=640)
fi

# The run folder is replaced: refuse anything that does not look like an earlier run of this script.
if [ -e "$out" ] && [ ! -e "$out/.kk_experiment" ]; then
  echo "error: $out exists and was not written by kk_experiment.sh; remove it or pass --out" >&2
  exit 2
fi
if [ -n "$sft_from" ] && [ "$(cd "$out" 2>/dev/null && pwd)" = "$sft_from" ]; then
  echo "error: --out must differ from --sft-from (the run folder is replaced)" >&2
  exit 2
fi
rm -rf "$out"
mkdir -p "$out/data/raw" "$out/plots"
touch "$out/.kk_experiment"
timings="$out/timings.txt"
: >"$timings"
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(date +%s.%N)"; }
phase_start=$(date +%s.%N)
run_start=$phase_start
phase_end() {  # phase_end NAME: appends "NAME seconds" to timings.txt
  local t
  t=$(elapsed "$phase_start")
  echo "$1 $t" >>"$timings"
  echo "== $1: ${t} s"
  phase_start=$(date +%s.%N)
}

# The test puzzles as one validation batch, so that every response of an eval decodes in one generation.
test_batch() { echo "data.val_batch_size=$(wc -l <"$out/data/test.jsonl")"; }
# eval_checkpoint NAME CHECKPOINT: accuracy per number of people on the test puzzles, in $out/NAME.txt
eval_checkpoint() {
  echo "== eval of $2 on the test puzzles"
  "$ppo" eval "${sft_cfg[@]}" "${common[@]}" data.val_files="$out/data/test.jsonl" "$(test_batch)" \
    --checkpoint "$2" | tee "$out/$1.txt"
  phase_end "$1"
}
# eval_passk NAME CHECKPOINT: pass@1 and pass@k (KK_PASSK samples per test puzzle, default 8, at temperature 1, the
# RL sampling temperature) per number of people, in $out/NAME.txt: can sampling find what greedy decoding misses?
eval_passk() {
  [ "$passk" -gt 1 ] || return 0
  echo "== pass@1 and pass@$passk of $2 on the test puzzles"
  "$ppo" eval "${sft_cfg[@]}" "${common[@]}" data.val_files="$out/data/test.jsonl" "$(test_batch)" \
    --checkpoint "$2" --samples "$passk" rollout.temperature=1.0 | tee "$out/$1.txt"
  phase_end "$1"
}
passk=${KK_PASSK:-8}
sft_cfg=(--config "$root/configs/kk_sft.yaml")
data=(data.train_files="$out/data/train.jsonl" data.val_files="$out/data/val.jsonl")
sft_dir="$out/sft"
if [ -n "$sft_from" ]; then
  echo "== data and SFT checkpoint from $sft_from"
  cp "$sft_from"/data/*.jsonl "$sft_from/data/split.txt" "$out/data/"
  cp "$sft_from/eval_sft.txt" "$out/"
  [ -f "$sft_from/pass_sft.txt" ] && cp "$sft_from/pass_sft.txt" "$out/"
  sft_dir="$sft_from/sft"
  sft_ckpt=$(latest_checkpoint "$sft_dir")
  phase_end reused
else
  echo "== data (test and validation seeds 1002 and 1003; training seeds: $train_seeds)"
  read -r test2 test3 <<<"$test_counts"
  read -r val2 val3 <<<"$val_counts"
  "$ppo" data kk --people 2 --count "$test2" --seed 1002 --out "$out/data/raw/test2.jsonl"
  "$ppo" data kk --people 3 --count "$test3" --seed 1002 --out "$out/data/raw/test3.jsonl"
  "$ppo" data kk --people 2 --count "$val2" --seed 1003 --out "$out/data/raw/val2.jsonl"
  "$ppo" data kk --people 3 --count "$val3" --seed 1003 --out "$out/data/raw/val3.jsonl"
  train_raw=()
  read -r train2 train3 <<<"$train_counts"
  for seed in $train_seeds; do
    "$ppo" data kk --people 2 --count "$train2" --seed "$seed" --out "$out/data/raw/train2_$seed.jsonl"
    "$ppo" data kk --people 3 --count "$train3" --seed "$seed" --out "$out/data/raw/train3_$seed.jsonl"
    train_raw+=("$out/data/raw/train2_$seed.jsonl" "$out/data/raw/train3_$seed.jsonl")
  done
  python3 "$root/scripts/kk_prepare.py" --test "$out/data/raw/test2.jsonl" "$out/data/raw/test3.jsonl" \
    --val "$out/data/raw/val2.jsonl" "$out/data/raw/val3.jsonl" --train "${train_raw[@]}" --out "$out/data" \
    "${prepare_extra[@]}" |
    tee "$out/data/split.txt"
  phase_end data

  echo "== SFT warm start"
  [ -n "$sft_epochs" ] && sft_extra+=(trainer.total_epochs="$sft_epochs")
  "$ppo" sft "${sft_cfg[@]}" "${data[@]}" "${common[@]}" "${sft_extra[@]}" trainer.output_dir="$out/sft" |
    tee "$out/sft.log"
  sft_ckpt=$(latest_checkpoint "$out/sft")
  phase_end sft
  eval_checkpoint eval_sft "$sft_ckpt"
  eval_passk pass_sft "$sft_ckpt"
fi

echo "== RL ($algo) from $sft_ckpt"
rl_cfg=("${sft_cfg[@]}" --config "$root/configs/kk_$algo.yaml")
rl_init=(actor.init_checkpoint="$sft_ckpt" trainer.resume_mode=disable)
if [ "$algo" = ppo ]; then
  # The critic's backbone starts from the SFT policy (its value head from the seeded init).
  "$ppo" export --checkpoint "$sft_ckpt" --out "$out/sft_hf"
  rl_init+=(model.path="$out/sft_hf")
fi
[ -n "$rl_steps" ] && rl_extra+=(trainer.total_training_steps="$rl_steps")
"$ppo" train "${rl_cfg[@]}" "${data[@]}" "${common[@]}" "${rl_extra[@]}" "${rl_init[@]}" \
  trainer.output_dir="$out/rl" | tee "$out/rl.log"
rl_ckpt=$(latest_checkpoint "$out/rl")
phase_end rl

eval_checkpoint eval_rl "$rl_ckpt"
eval_passk pass_rl "$rl_ckpt"

echo "== plots"
plot() { python3 "$root/scripts/plot_metrics.py" "$@"; }
plot "$sft_dir/metrics.jsonl" --out "$out/plots/sft_loss.svg" --keys sft/loss --smooth 5 \
  --title "SFT: cross-entropy of the answer tokens" --ylabel loss
plot "$sft_dir/metrics.jsonl" --out "$out/plots/sft_val_acc.svg" --keys val/kk/acc/mean val/kk/acc/2 val/kk/acc/3 \
  --title "SFT: validation accuracy (greedy), all / 2 / 3 people" --ylabel accuracy
plot "$out/rl/metrics.jsonl" --out "$out/plots/rl_score.svg" --keys critic/score/mean --smooth 10 \
  --title "RL ($algo): mean Logic-RL reward of the sampled responses" --ylabel "reward (-3..3)"
plot "$out/rl/metrics.jsonl" --out "$out/plots/rl_acc.svg" --keys critic/acc/mean val/kk/acc/mean val/kk/acc/2 \
  val/kk/acc/3 --smooth 10 --title "RL ($algo): accuracy of samples (train) and validation (greedy)" \
  --ylabel accuracy
phase_end plots

total=$(elapsed "$run_start")
python3 - "$out" "$algo" "$total" <<'EOF'
import os
import sys

out, algo, total = sys.argv[1], sys.argv[2], sys.argv[3]


def table(path):
    """{people: (puzzles, accuracy)} and the mean score from `ppo eval` output (difficulty, prompts, accuracy,
    format_ok, score)."""
    rows, score = {}, None
    for line in open(path):
        parts = line.split()
        if len(parts) >= 5 and (parts[0].isdigit() or parts[0] == "all"):
            rows[parts[0]] = (parts[1], parts[2])
            if parts[0] == "all":
                score = parts[4]
    return rows, score


sft, sft_score = table(f"{out}/eval_sft.txt")
rl, rl_score = table(f"{out}/eval_rl.txt")
lines = ["| people | test puzzles | accuracy after SFT | accuracy after SFT + " + algo.upper() + " |",
         "|---|---|---|---|"]
for key in sorted(sft, key=lambda k: (k == "all", k)):
    lines.append(f"| {key} | {sft[key][0]} | {sft[key][1]} | {rl.get(key, ('', '?'))[1]} |")
lines.append(f"| mean reward | | {sft_score} | {rl_score} |")
# pass@1 / pass@k tables (`ppo eval --samples k`: difficulty, prompts, pass@1, pass@k, format_ok, score).
def pass_table(path):
    rows, k = {}, None
    for line in open(path):
        parts = line.split()
        if parts and parts[0] == "difficulty":
            k = parts[3]
        elif len(parts) >= 4 and (parts[0].isdigit() or parts[0] == "all"):
            rows[parts[0]] = (parts[2], parts[3])
    return rows, k


passes = {name: pass_table(f"{out}/pass_{name}.txt") for name in ("sft", "rl") if os.path.exists(f"{out}/pass_{name}.txt")}
if passes:
    k = next(iter(passes.values()))[1]
    lines += ["", f"| people | pass@1 after SFT | {k} after SFT | pass@1 after SFT + {algo.upper()} | "
              f"{k} after SFT + {algo.upper()} |", "|---|---|---|---|---|"]
    for key in sorted(sft, key=lambda key: (key == "all", key)):
        cells = []
        for name in ("sft", "rl"):
            cells += list(passes[name][0].get(key, ("?", "?"))) if name in passes else ["?", "?"]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
timings = [line.split() for line in open(f"{out}/timings.txt")]
with open(f"{out}/results.md", "w") as f:
    f.write("\n".join(lines) + "\n\n")
    f.write(open(f"{out}/data/split.txt").read() + "\n")
    f.write("wall time (s): " + ", ".join(f"{name} {t}" for name, t in timings) + f", total {total}\n")
print("\n".join(lines))
EOF
echo "results: $out/results.md; curves: $out/plots/"
