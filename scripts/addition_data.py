#!/usr/bin/env python3
"""Two-number addition in veRL's record layout, for a small chat model (configs/smollm2_addition_lora.yaml).

    python3 scripts/addition_data.py --out DIR [--train 3000] [--val 200] [--seed 11]

Writes DIR/train.jsonl and DIR/val.jsonl. Each record asks "What is A + B? Reply with only the number." for A and B
in 1..99, as one user message (data.apply_chat_template renders it with the model's template):
    {"data_source": "arithmetic",
     "prompt": [{"role": "user", "content": "What is 37 + 48? Reply with only the number."}],
     "reward_model": {"style": "rule", "ground_truth": "85"},
     "extra_info": {"split": "val", "index": 0, "difficulty": 2}}
difficulty is 1 when both numbers have one digit, else 2. The pairs are drawn without replacement, so the two splits
share no question. The reward is the config's reward.command (the response's last number against ground_truth).
"""
import argparse
import json
import os
import random


def record(a, b, split, index):
    return {"data_source": "arithmetic",
            "prompt": [{"role": "user", "content": f"What is {a} + {b}? Reply with only the number."}],
            "reward_model": {"style": "rule", "ground_truth": str(a + b)},
            "extra_info": {"split": split, "index": index, "difficulty": 1 if max(a, b) < 10 else 2}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--train", type=int, default=3000)
    parser.add_argument("--val", type=int, default=200)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    pairs = [(a, b) for a in range(1, 100) for b in range(1, 100)]
    if args.train + args.val > len(pairs):
        parser.error(f"--train + --val must be at most {len(pairs)} (the distinct pairs)")
    random.Random(args.seed).shuffle(pairs)
    os.makedirs(args.out, exist_ok=True)
    splits = [("val", pairs[:args.val]), ("train", pairs[args.val:args.val + args.train])]
    for split, chosen in splits:
        with open(os.path.join(args.out, f"{split}.jsonl"), "w") as f:
            for i, (a, b) in enumerate(chosen):
                f.write(json.dumps(record(a, b, split, i)) + "\n")
    print(f"wrote {args.train} training and {args.val} validation records to {args.out}")


if __name__ == "__main__":
    main()
