#!/usr/bin/env python3
"""The table of scripts/rlhf_pipeline.sh's run directory OUT (standard library only).

    python3 scripts/rlhf_table.py OUT

Prints, as Markdown: the reward model's held-out pair accuracy (OUT/rm/metrics.jsonl, before and after training),
then PPO's course (OUT/ppo/metrics.jsonl) at every validation: the rule's validation accuracy and score (the policy
greedy on held-out prompts, scored by the task's rule, which PPO never saw) beside the reward model's mean score of
the step's sampled responses (reward/rm/mean, PPO's only reward).
"""
import json
import sys


def lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main(out):
    rm = [m for m in lines(f"{out}/rm/metrics.jsonl") if "val/pairs/acc/mean" in m]
    print("| reward model | held-out pair accuracy | mean margin |")
    print("|---|---|---|")
    for m in (rm[0], rm[-1]):
        print(f"| step {int(m['training/global_step'])} | {m['val/pairs/acc/mean']:.3f} | {m['val/pairs/margin/mean']:.3f} |")
    print()
    ppo = lines(f"{out}/ppo/metrics.jsonl")
    source = next(k.split("/")[1] for m in ppo for k in m if k.startswith("val/") and k.endswith("/acc/mean"))
    print("| PPO step | rule: val accuracy | rule: val score | reward model: mean score of the step's responses |")
    print("|---|---|---|---|")
    for i, m in enumerate(ppo):
        if f"val/{source}/acc/mean" not in m:
            continue
        step = int(m["training/global_step"])
        # The step's own responses (validation before training has none: the first step's stand in for them).
        rm_score = m.get("reward/rm/mean", ppo[i + 1].get("reward/rm/mean") if i + 1 < len(ppo) else None)
        score = "" if rm_score is None else f"{rm_score:.3f}"
        print(f"| {step} | {m[f'val/{source}/acc/mean']:.3f} | {m[f'val/{source}/score/mean']:.3f} | {score} |")


if __name__ == "__main__":
    main(sys.argv[1])
