#!/usr/bin/env python3
"""The tables of scripts/distill_experiment.sh's run directory OUT (standard library only).

    python3 scripts/distill_table.py OUT

For each start (OUT/<start>-<mode>/metrics.jsonl), as Markdown: the student's validation accuracy (greedy, the task's
rule) at every validation step under each signal, then the first validated step at which it reached 0.9; then, at the
last step, the mean response length (tokens), the reverse KL to the teacher and the argmax agreement of the step's
own samples.
"""
import glob
import json
import os
import sys

MODES = ["rl", "reward_gamma1", "reward", "forward_kl_topk", "jsd_topk"]


def accuracy_by_step(path):
    curve = {}
    with open(path) as f:
        for line in f:
            m = json.loads(line) if line.strip() else {}
            acc = [v for k, v in m.items() if k.startswith("val/") and k.endswith("/acc/mean")]
            if acc:
                curve[int(m["training/global_step"])] = acc[0]
    return curve


def lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def last_step(out, start, modes):
    print("| last step | " + " | ".join(modes) + " |")
    print("|---" * (len(modes) + 1) + "|")
    runs = {mode: lines(os.path.join(out, f"{start}-{mode}", "metrics.jsonl")) for mode in modes}
    rows = [("response length", "response_length/mean", "{:.2f}"), ("reverse KL to the teacher", "distill/reverse_kl",
            "{:.3f}"), ("argmax agreement", "distill/argmax_agreement", "{:.3f}")]
    for name, key, form in rows:
        cells = [form.format(r[-1][key]) if key in r[-1] else "" for r in runs.values()]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()


def main(out):
    for start in ("sft", "scratch"):
        runs = {}
        for mode in MODES:
            path = os.path.join(out, f"{start}-{mode}", "metrics.jsonl")
            if os.path.exists(path):
                runs[mode] = accuracy_by_step(path)
        if not runs:
            continue
        print(f"start: {start}\n")
        print("| step | " + " | ".join(runs) + " |")
        print("|---" * (len(runs) + 1) + "|")
        steps = sorted(set().union(*[set(c) for c in runs.values()]))
        for step in steps:
            cells = [f"{c[step]:.3f}" if step in c else "" for c in runs.values()]
            print(f"| {step} | " + " | ".join(cells) + " |")
        reached = []
        for c in runs.values():
            first = [s for s in sorted(c) if c[s] >= 0.9]
            reached.append(str(first[0]) if first else f"not in {max(c)}")
        print("| steps to 0.9 | " + " | ".join(reached) + " |\n")
        last_step(out, start, list(runs))


if __name__ == "__main__":
    main(sys.argv[1])
