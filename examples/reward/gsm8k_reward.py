#!/usr/bin/env python3
"""GSM8K reward for ppo.cpp's reward.command (the protocol is in README.md next to this file).

    reward.command="python3 examples/reward/gsm8k_reward.py"                     # strict: the number after "####"
    reward.command="python3 examples/reward/gsm8k_reward.py --method flexible"   # the response's last number
    reward.command="python3 examples/reward/gsm8k_reward.py --method flexible --final-turn"   # of the last turn

Reads one JSON request per line on stdin and writes one JSON answer per line on stdout, in order, flushing after
every line: {"score": 1.0 or 0.0, "acc": true/false, "has_answer": 1/0}. The response's final answer is the number
after its last "#### " (GSM8K's answer format, as veRL's gsm8k scorer reads it); it is correct when it equals the
request's ground_truth as a number, after removing ',' and '$' from both ("1,000" == "$1000" == "1000.0").
With --method flexible (veRL's gsm8k.py extract_solution(method="flexible")), the final answer is the response's last
number instead, wherever it stands ("The answer is 14." gives 14). With --final-turn, only the last assistant turn
of a multi-turn trajectory is read (the text after its last "<|im_start|>assistant\n"), so that a number in a tool's
answer earlier in the transcript is not taken for the policy's own. Standard library only. A request that is not a JSON object ends the program with status 1 and a message on stderr,
so the trainer stops with an error instead of training on a made-up reward.
"""
import json
import re
import sys
from decimal import Decimal, InvalidOperation

FINAL_ANSWER = re.compile(r"####\s*([-$0-9.,]+)")
ANY_NUMBER = re.compile(r"(-?[0-9.,]+)")  # veRL's flexible pattern


def normalize(text):
    """'$1,000' -> '1000'; the empty string when nothing is left."""
    return str(text).replace(",", "").replace("$", "").strip()


def final_answer(response, flexible=False):
    """The normalized number after the last '#### ' (flexible: the last number anywhere), or None."""
    if flexible:  # as veRL: the last match that is not only '.'
        matches = [m for m in ANY_NUMBER.findall(response) if m.strip(".,")]
    else:
        matches = FINAL_ANSWER.findall(response)
    if not matches:
        return None
    answer = normalize(matches[-1]).rstrip(".")  # "#### 42." ends a sentence
    return answer or None


def same_number(a, b):
    try:
        return Decimal(a) == Decimal(b)
    except InvalidOperation:
        return a == b


def answer(request, flexible=False, final_turn=False):
    if not isinstance(request, dict):
        raise ValueError("a request must be a JSON object")
    response = str(request.get("response", ""))
    if final_turn:
        response = response.split("<|im_start|>assistant\n")[-1]
    given = final_answer(response, flexible)
    correct = given is not None and same_number(given, normalize(request.get("ground_truth", "")))
    return {"score": 1.0 if correct else 0.0, "acc": correct, "has_answer": int(given is not None)}


def main():
    args = sys.argv[1:]
    final_turn = "--final-turn" in args
    if final_turn:
        args.remove("--final-turn")
    flexible = args == ["--method", "flexible"]
    if args and not flexible:
        print("gsm8k_reward.py: usage: gsm8k_reward.py [--method flexible] [--final-turn]", file=sys.stderr)
        return 2
    for number, line in enumerate(sys.stdin):
        if not line.strip():
            continue
        try:
            reply = answer(json.loads(line), flexible, final_turn)
        except ValueError as e:  # json.JSONDecodeError is a ValueError
            print(f"gsm8k_reward.py: request line {number + 1}: {e}", file=sys.stderr)
            return 1
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()  # the trainer waits for this line: never leave it in a buffer
    return 0  # EOF on stdin: the trainer is done


if __name__ == "__main__":
    sys.exit(main())
