#!/usr/bin/env python3
"""README's "Scaling to larger models" table: `ppo plan` for Qwen2.5 shapes on 8 x 80 GB at Logic-RL's settings.

    python3 bench/plan_table.py [key=value ...]

configs/kk_logic_rl.yaml (micro-batches of 4 responses for the updates and the log-probs) with each shape of
configs/shapes/, PPO (algorithm.adv_estimator=gae: actor, critic, reference) and GRPO (actor, reference), at
parallel.zero_stage 0 and 3, without and with offload (every actor.offload and critic.offload flag), gradient
checkpointing on. Prints a Markdown table: per cell whether the run fits and its per-GPU peak.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PPO = os.environ.get("PPO", os.path.join(ROOT, "build/ppo"))
SHAPES = ["0.5b", "1.5b", "3b", "7b", "14b"]
MICRO = ["actor.ppo_micro_batch_size_per_gpu=4", "critic.ppo_micro_batch_size_per_gpu=4",
         "rollout.log_prob_micro_batch_size_per_gpu=4", "ref.log_prob_micro_batch_size_per_gpu=4"]
OFFLOAD = [f"{role}.offload.{what}=true" for role in ("actor", "critic") for what in ("param", "grad", "optimizer")]


def cell(shape, estimator, stage, offload, extra):
    cmd = [PPO, "plan", "--config", os.path.join(ROOT, "configs/kk_logic_rl.yaml"), "--config",
           os.path.join(ROOT, f"configs/shapes/qwen2.5-{shape}.yaml"), "--world-size", "8", "--device-memory",
           "80GB", f"algorithm.adv_estimator={estimator}", f"parallel.zero_stage={stage}"] + MICRO
    out = subprocess.run(cmd + (OFFLOAD if offload else []) + extra, capture_output=True, text=True, check=True).stdout
    m = re.search(r"^peak: ([\d.]+) (MiB|GiB) in (\w+), device [\d.]+ GiB: (fits|DOES NOT FIT)", out, re.M)
    gib = float(m.group(1)) / (1024 if m.group(2) == "MiB" else 1)
    return f"{'fits' if m.group(4) == 'fits' else '**no**'} {gib:.0f} GiB"


def main():
    extra = sys.argv[1:]
    columns = [(e, s, o) for e in ("gae", "grpo") for s in (0, 3) for o in (False, True)]
    names = {"gae": "PPO", "grpo": "GRPO"}
    print("| model | " + " | ".join(f"{names[e]} stage {s}{' + offload' if o else ''}" for e, s, o in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for shape in SHAPES:
        print(f"| Qwen2.5-{shape.upper()} | " + " | ".join(cell(shape, e, s, o, extra) for e, s, o in columns) + " |")


if __name__ == "__main__":
    main()
