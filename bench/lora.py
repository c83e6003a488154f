#!/usr/bin/env python3
"""LoRA against full fine-tuning (BENCHMARKS.md, "LoRA"): model state per rank, peak memory per phase and time per
phase, rank 8 on every linear layer against training every weight.

    python3 bench/lora.py [--steps N] CONFIG.yaml [key=value ...]

Runs `ppo train --config CONFIG.yaml trainer.total_training_steps=N` twice (full, then actor.lora.rank=8
critic.lora.rank=8 with alpha 16, all-linear), one rank, and prints each metric of the last step side by side:
memory/model_state_mib, memory/optimizer_state_mib, memory/<phase>_peak_mib and timing_s/<phase>.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PPO = os.environ.get("PPO", os.path.join(ROOT, "build/ppo"))
LORA = ["actor.lora.rank=8", "actor.lora.alpha=16", "critic.lora.rank=8", "critic.lora.alpha=16"]


def run(config, steps, extra):
    with tempfile.TemporaryDirectory() as out:
        cmd = [PPO, "train", "--config", config, f"trainer.output_dir={out}", f"trainer.total_training_steps={steps}",
               "trainer.test_freq=0", "trainer.val_before_train=false", "trainer.write_checkpoints=false",
               "trainer.logger=[jsonl]"] + extra
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        return [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))][-1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("config")
    parser.add_argument("extra", nargs="*")
    args = parser.parse_args()
    full = run(args.config, args.steps, args.extra)
    lora = run(args.config, args.steps, args.extra + LORA)
    keys = ["memory/model_state_mib", "memory/optimizer_state_mib", "timing_s/step"]
    keys += sorted(k for k in full if k.endswith("_peak_mib") and k != "memory/host_state_mib")
    keys += sorted(k for k in full if k.startswith("timing_s/") and k != "timing_s/step")
    print(f"{'metric':<32} {'full':>10} {'LoRA r8':>10} {'ratio':>7}")
    for k in keys:
        a, b = full.get(k), lora.get(k)
        if a is None or b is None:
            print(f"{k:<32} {str(a):>10} {str(b):>10}")
            continue
        print(f"{k:<32} {a:>10.2f} {b:>10.2f} {b / a if a else float('nan'):>6.2f}x")


if __name__ == "__main__":
    main()
