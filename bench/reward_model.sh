#!/usr/bin/env bash
# The reward model's scoring phase against the reference policy's log-prob phase on the same tokens, in one run:
# SmolLM2-135M-Instruct (scripts/get_smollm2.sh) as the policy and its reference, and the same backbone as a
# LlamaForSequenceClassification (made here by transformers' AutoModelForSequenceClassification, its score head
# seeded) as the reward model. Its tokenizer and chat template are the policy's, so it scores the policy's ids as they
# are: both phases run one packed forward over the same sequences, the reference's followed by the LM head on the
# response tokens, the reward model's by the score head on one token a row.
# Usage: bench/reward_model.sh [steps [key=value ...]]   (from the repository root after building; default 4 steps;
# the overrides go to the run). Prints, per step after the first, each phase's seconds and tokens/s
# (perf/total_num_tokens / the phase's time) and their ratio, then the medians.
set -euo pipefail
steps=${1:-4}
python=${PPO_REF_PYTHON:-.venv-ref/bin/python}
bash scripts/get_smollm2.sh >/dev/null
out=$(mktemp -d)
trap '[ -n "${PPO_BENCH_KEEP:-}" ] || rm -rf "$out"' EXIT
HF_HUB_OFFLINE=1 "$python" - .ref/smollm2-135m-instruct "$out/rm" >"$out/make_rm.log" 2>&1 <<'PY'
import shutil, sys
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
source, out = sys.argv[1:]
torch.manual_seed(0)
tokenizer = AutoTokenizer.from_pretrained(source)
model = AutoModelForSequenceClassification.from_pretrained(source, num_labels=1, dtype=torch.float32)
model.config.pad_token_id = tokenizer.pad_token_id
model.save_pretrained(out)
tokenizer.save_pretrained(out)
for name in ["tokenizer.json", "chat_template.jinja"]:  # the policy's files, byte for byte
    shutil.copy(f"{source}/{name}", f"{out}/{name}")
PY
[ -f "$out/rm/config.json" ] || { cat "$out/make_rm.log"; exit 1; }
build/ppo train --config configs/kk_smollm2.yaml trainer.output_dir="$out/run" trainer.total_training_steps="$steps" \
  trainer.save_freq=0 trainer.write_checkpoints=false algorithm.adv_estimator=grpo \
  reward_model.enable=true reward_model.model.path="$out/rm" reward_model.rule_weight=1 \
  reward_model.micro_batch_size_per_gpu=4 "${@:2}" >"$out/run.log" 2>&1 || { cat "$out/run.log"; exit 1; }
grep -q "reads the policy's ids" "$out/run.log" || { echo "error: the reward model re-rendered the responses"; exit 1; }
python3 - "$out/run/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][1:]  # step 1 warms up
ratios, ref_rates, rm_rates = [], [], []
for r in rows:
    tokens = r["perf/total_num_tokens"]
    ref, rm = r["timing_s/ref"], r["timing_s/reward_model"]
    ref_rates.append(tokens / ref), rm_rates.append(tokens / rm), ratios.append(ref / rm)
    print(f"step {int(r['training/global_step'])}: {tokens:.0f} tokens  ref {ref:.3f} s ({tokens / ref:.0f} tokens/s)  "
          f"reward model {rm:.3f} s ({tokens / rm:.0f} tokens/s)  reward model / ref speed {ref / rm:.3f}")
print(f"median: ref {statistics.median(ref_rates):.0f} tokens/s, reward model {statistics.median(rm_rates):.0f} "
      f"tokens/s, ratio {statistics.median(ratios):.3f}")
PY
