#!/usr/bin/env python3
"""Multiplication questions with a calculator tool, in veRL's record layout (configs/smollm2_calculator.yaml).

    python3 examples/tools/arithmetic_data.py --out DIR [--train 3000] [--val 200] [--seed 5]

Writes DIR/train.jsonl and DIR/val.jsonl. Each record asks "What is A * B?" (A in 100..999, B in 10..99) after a
system message that describes the calculator and one worked exchange that uses it (a user question, the assistant's
call, the tool's answer and the assistant's reply); data.apply_chat_template renders them with the model's template:
    {"data_source": "arithmetic",
     "prompt": [{"role": "system", "content": "...<tool_call>...</tool_call>..."},
                {"role": "user", "content": "What is 12 * 34?"},
                {"role": "assistant", "content": "<tool_call>12 * 34</tool_call>"},
                {"role": "tool", "content": "408"},
                {"role": "assistant", "content": "408"},
                {"role": "user", "content": "What is 347 * 29?"}],
     "reward_model": {"style": "rule", "ground_truth": "10063"},
     "extra_info": {"split": "val", "index": 0, "difficulty": 3}}
The pairs are drawn without replacement, so the two splits share no question. The reward is the config's
reward.command (the response's last number against ground_truth); the calculator is examples/tools/calculator.py.
"""
import argparse
import json
import os
import random

SYSTEM = ("You can use a calculator. To use it, write the expression between <tool_call> and </tool_call>, for "
          "example <tool_call>12 * 34</tool_call>, and the result will be given to you. Then reply with only the "
          "final number.")
EXAMPLE = [{"role": "user", "content": "What is 12 * 34?"},
           {"role": "assistant", "content": "<tool_call>12 * 34</tool_call>"},
           {"role": "tool", "content": "408"},
           {"role": "assistant", "content": "408"}]


def record(a, b, split, index):
    return {"data_source": "arithmetic",
            "prompt": [{"role": "system", "content": SYSTEM}] + EXAMPLE +
                      [{"role": "user", "content": f"What is {a} * {b}?"}],
            "reward_model": {"style": "rule", "ground_truth": str(a * b)},
            "extra_info": {"split": split, "index": index, "difficulty": 3}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--train", type=int, default=3000)
    parser.add_argument("--val", type=int, default=200)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    pairs = random.Random(args.seed).sample([(a, b) for a in range(100, 1000) for b in range(10, 100)],
                                            args.train + args.val)
    os.makedirs(args.out, exist_ok=True)
    for split, chosen in (("train", pairs[:args.train]), ("val", pairs[args.train:])):
        with open(os.path.join(args.out, f"{split}.jsonl"), "w") as f:
            for i, (a, b) in enumerate(chosen):
                f.write(json.dumps(record(a, b, split, i)) + "\n")


if __name__ == "__main__":
    main()
