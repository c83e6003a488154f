#!/usr/bin/env bash
# ppo rm's pairs per second, packed sequences against padded tensors, in one run: SmolLM2-135M-Instruct
# (scripts/get_smollm2.sh) as the reward model's start (its backbone, the score head seeded), on preference pairs of
# chat prompts whose responses run from a few to ~100 tokens (made here, seeded), 16 pairs a step in micro-batches
# of 8 sequences, critic.use_remove_padding true against false, alternated ABAB so that a drift of the machine hits
# both alike.
# Usage: bench/rm.sh [steps [key=value ...]]   (from the repository root after building; default 4 steps a run; the
# overrides go to every run). Prints each run's seconds per step after the first (timing_s/step is the whole step),
# its pairs/s, and the medians' ratio.
set -euo pipefail
steps=${1:-4}
bash scripts/get_smollm2.sh >/dev/null
out=$(mktemp -d)
trap '[ -n "${PPO_BENCH_KEEP:-}" ] || rm -rf "$out"' EXIT
python3 - "$out/pairs.jsonl" <<'PY'
import json, random, sys
random.seed(0)
words = "the a one two three red blue green cat dog bird runs jumps sleeps quickly slowly and but or then".split()
with open(sys.argv[1], "w") as f:
    for i in range(256):
        prompt = [{"role": "user", "content": " ".join(random.choices(words, k=random.randint(4, 30)))}]
        lengths = [random.choice([4, 8, 16, 32, 64, 96]) for _ in range(2)]
        chosen, rejected = (" ".join(random.choices(words, k=n)) for n in lengths)
        f.write(json.dumps({"prompt": prompt, "chosen": chosen, "rejected": rejected + " no"}) + "\n")
PY
run() {  # run NAME PACKED
  build/ppo rm --config configs/kk_smollm2.yaml data.train_files="[$out/pairs.jsonl]" trainer.output_dir="$out/$1" \
    trainer.total_training_steps="$steps" trainer.save_freq=0 trainer.write_checkpoints=false trainer.test_freq=0 \
    trainer.val_before_train=false data.train_batch_size=16 critic.ppo_mini_batch_size=16 \
    critic.ppo_micro_batch_size_per_gpu=8 data.max_prompt_length=96 data.max_response_length=128 \
    critic.use_remove_padding="$2" "${@:3}" >"$out/$1.log" 2>&1 || { cat "$out/$1.log"; exit 1; }
}
for round in 1 2; do
  run "packed_$round" true "${@:2}"
  run "padded_$round" false "${@:2}"
done
python3 - "$out" "$steps" <<'PY'
import json, statistics, sys
out = sys.argv[1]
def per_step(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl") if l.strip()][1:]  # step 1 warms up
    return [r["timing_s/step"] for r in rows]
medians = {}
for kind in ("packed", "padded"):
    times = per_step(f"{kind}_1") + per_step(f"{kind}_2")
    medians[kind] = statistics.median(times)
    print(f"{kind}: {' '.join(f'{t:.2f}' for t in times)} s/step; median {medians[kind]:.2f} s = "
          f"{16 / medians[kind]:.2f} pairs/s")
print(f"packed / padded speed: {medians['padded'] / medians['packed']:.2f}x")
PY
