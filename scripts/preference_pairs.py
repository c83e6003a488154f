#!/usr/bin/env python3
"""Preference pairs from sampled responses and their rule rewards, for `ppo rm` (standard library only).

    python3 scripts/preference_pairs.py SAMPLES TRAIN_OUT VAL_OUT [--val-every K]

SAMPLES is `ppo generate --jsonl` output: one line per response, {"prompt", "response", "reward", ...}, the responses
of a prompt on consecutive lines. For each prompt whose non-empty responses' rewards differ, one pair: its best
response (highest reward; the first of equals) chosen, its worst rejected. Every K-th pair (default 10) goes to VAL_OUT, the
rest to TRAIN_OUT, one {"prompt", "chosen", "rejected"} per line. Prints the counts.
"""
import argparse
import json


def groups(path):
    prompt, rows = None, []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            if row["prompt"] != prompt and rows:
                yield prompt, rows
                rows = []
            prompt = row["prompt"]
            rows.append(row)
    if rows:
        yield prompt, rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("samples")
    parser.add_argument("train_out")
    parser.add_argument("val_out")
    parser.add_argument("--val-every", type=int, default=10)
    args = parser.parse_args()
    prompts = pairs = 0
    with open(args.train_out, "w") as train, open(args.val_out, "w") as val:
        for prompt, rows in groups(args.samples):
            prompts += 1
            rows = [r for r in rows if r["response"]]  # an empty response (EOS at once) is no pair's response
            if not rows:
                continue
            best = max(rows, key=lambda r: r["reward"])
            worst = min(rows, key=lambda r: r["reward"])
            if best["reward"] == worst["reward"] or best["response"] == worst["response"]:
                continue
            pair = {"prompt": prompt, "chosen": best["response"], "rejected": worst["response"]}
            (val if pairs % args.val_every == args.val_every - 1 else train).write(json.dumps(pair) + "\n")
            pairs += 1
    held_out = pairs // args.val_every
    print(f"{prompts} prompts: {pairs} pairs, {pairs - held_out} for training and {held_out} held out")


if __name__ == "__main__":
    main()
