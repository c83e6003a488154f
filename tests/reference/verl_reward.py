"""veRL's rule-based math rewards, the reference for tasks/math_answer ([ref] test in tests/tasks/test_math_answer.cpp).

    python verl_reward.py < cases.jsonl > scores.jsonl

Each input line {"fn": "gsm8k" | "math", "response": ..., "ground_truth": ..., "solution": false} gives one output
line {"score": float}: verl/utils/reward_score/gsm8k.py compute_score (its defaults: method "strict", format_score
0.0, score 1.0) or math_reward.py compute_score. With "solution": true the ground truth is a full dataset solution,
first reduced as veRL's examples/data_preprocess do: gsm8k.py keeps the "#### N" number without commas,
math_dataset.py keeps remove_boxed(last_boxed_only_string(solution)).

The two files are loaded by path from the installed verl wheel (pip install --no-deps verl==0.9.1, made by
scripts/install-deps.sh), without importing the verl package itself (its __init__ needs torch, ray, ...).
"""
import contextlib
import importlib.util
import json
import os
import re
import sys


def load(name):
    spec = importlib.util.find_spec("verl")  # locates the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        sys.exit("verl_reward.py: no verl package; install it with pip install --no-deps verl==0.9.1")
    path = os.path.join(spec.submodule_search_locations[0], "utils", "reward_score", name + ".py")
    module_spec = importlib.util.spec_from_file_location("verl_reward_" + name, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


gsm8k = load("gsm8k")
math_reward = load("math_reward")


def gsm8k_truth(solution):  # examples/data_preprocess/gsm8k.py extract_solution
    return re.search("#### (\\-?[0-9\\.\\,]+)", solution).group(0).split("#### ")[1].replace(",", "")


def math_truth(solution):  # examples/data_preprocess/math_dataset.py
    return math_reward.remove_boxed(math_reward.last_boxed_only_string(solution))


for line in sys.stdin:
    if not line.strip():
        continue
    case = json.loads(line)
    fn, truth = case["fn"], case["ground_truth"]
    # math_reward.compute_score prints the exceptions it catches: keep stdout for the scores.
    with contextlib.redirect_stdout(sys.stderr):
        if fn == "gsm8k":
            score = gsm8k.compute_score(case["response"], gsm8k_truth(truth) if case.get("solution") else truth)
        elif fn == "math":
            score = math_reward.compute_score(case["response"], math_truth(truth) if case.get("solution") else truth)
        else:
            sys.exit("verl_reward.py: unknown fn " + repr(fn))
    print(json.dumps({"score": float(score)}), flush=True)
