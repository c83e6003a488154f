#!/usr/bin/env python3
"""A small GSM8K-style dataset of arithmetic word problems, written in veRL's record layout (the worked example of
docs/your-own-task.md; configs/gsm8k_style.yaml trains on it).

    python3 scripts/gsm8k_style_data.py --out DIR [--train 2000] [--val 100] [--seed 1] [--format jsonl|parquet]

Writes DIR/train.jsonl and DIR/val.jsonl, one record per line, or with --format parquet DIR/train.parquet and
DIR/val.parquet as veRL's preprocessing writes them (pandas DataFrame.to_parquet: needs pandas and pyarrow, as in
.venv-ref), with the records veRL's examples/data_preprocess/gsm8k.py lays GSM8K out as:
    {"data_source": "gsm8k",
     "prompt": [{"role": "user", "content": "<question> Let's think step by step and output the final answer
                 after \\"####\\"."}],
     "ability": "math",
     "reward_model": {"style": "rule", "ground_truth": "12"},
     "extra_info": {"split": "train", "index": 0, "question": "...", "answer": "5+7=12\\n#### 12",
                    "difficulty": 1}}
The questions are one- or two-step problems over small numbers ("difficulty" = the number of steps), short enough
for a character-level model. data_source "gsm8k" picks the gsm8k reward (the last "#### N" against the ground truth);
extra_info.answer is the worked solution, the SFT target. The two splits share no question.
"""
import argparse
import json
import os
import random

# veRL's instruction (examples/data_preprocess/gsm8k.py).
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
NAMES = ["Ann", "Ben", "Cal", "Dee", "Eve", "Fay", "Gus", "Hal", "Ivy", "Jon"]
THINGS = ["apples", "pens", "cards", "shells", "coins", "books"]


def one_step(rng):
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b = rng.randint(2, 9), rng.randint(1, 9)
    if rng.random() < 0.5:
        return f"{name} has {a} {thing} and gets {b} more. How many now?", f"{a}+{b}={a + b}", a + b
    a = a + b
    return f"{name} has {a} {thing} and gives away {b}. How many now?", f"{a}-{b}={a - b}", a - b


def two_steps(rng):
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b, c = rng.randint(2, 9), rng.randint(1, 9), rng.randint(1, 9)
    mid = a + b
    if c > mid:
        c = mid
    return (f"{name} has {a} {thing}, gets {b} more, then gives away {c}. How many now?",
            f"{a}+{b}={mid}\n{mid}-{c}={mid - c}", mid - c)


def record(question, work, value, split, index, steps):
    answer = f"{work}\n#### {value}"
    return {"data_source": "gsm8k",
            "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(value)},
            "extra_info": {"split": split, "index": index, "question": question, "answer": answer,
                           "difficulty": steps}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--val", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    seen = set()
    splits = {"val": [], "train": []}
    for split, count in (("val", args.val), ("train", args.train)):
        tries = 0
        while len(splits[split]) < count:
            tries += 1
            if tries > 100 * count + 1000:
                raise SystemExit(f"error: cannot draw {count} distinct {split} questions")
            steps = 1 + len(splits[split]) % 2
            question, work, value = (one_step if steps == 1 else two_steps)(rng)
            if question in seen:
                continue
            seen.add(question)
            splits[split].append(record(question, work, value, split, len(splits[split]), steps))
    os.makedirs(args.out, exist_ok=True)
    for split, records in splits.items():
        if args.format == "parquet":
            import pandas  # only here: the JSONL form needs nothing beyond the standard library

            pandas.DataFrame(records).to_parquet(os.path.join(args.out, f"{split}.parquet"))
            continue
        with open(os.path.join(args.out, f"{split}.jsonl"), "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
    print(f"wrote {len(splits['train'])} training and {len(splits['val'])} validation records to {args.out}")


if __name__ == "__main__":
    main()
