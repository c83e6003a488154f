#!/usr/bin/env python3
"""Held-out splits of K&K puzzles for a character-level model (used by scripts/kk_experiment.sh).

    python3 scripts/kk_prepare.py --test test_raw.jsonl --val val_raw.jsonl --train a.jsonl b.jsonl --out DIR

Reads records written by `ppo data kk` and writes DIR/{train,val,test}.jsonl, where
  * a puzzle is identified by its logical structure: the statements with people renumbered and the operands of
    and / or / <=> sorted, minimised over every ordering of the people. Two quizzes with other names, phrasings
    or speaker order but the same structure are the same puzzle. Test keeps one record per structure; val drops
    test structures; train drops test and val structures and exact duplicates. The script then checks that no test
    quiz text and no test structure is left in train or val, and exits 1 otherwise.
  * each record gets a short "prompt" and "answer" (tasks/kk.h: they replace the Logic-RL template and the
    reasoning reference answer; the reward is unchanged). The prompt is the quiz without its first two sentences
    (the same in every generated quiz), with the closing question followed by the people numbered as the answer
    lists them (a character model copies "(1) Ella" far more easily from there than from the list at the start),
    in a minimal User/Assistant frame that ends with the opening "<think>":
        User: You meet 2 inhabitants: Ella, and Liam. Ella said that ... Liam stated, "Ella is a knave". Who is a
        knight and who is a knave: (1) Ella (2) Liam?
        Assistant: <think>
    The answer is the Logic-RL answer block after an empty reasoning block:
        " </think> <answer> (1) Ella is a knight\\n(2) Liam is a knave </answer>".
Prints the counts per number of people and what was removed.
"""
import argparse
import collections
import itertools
import json
import os
import sys

PREAMBLE = ("A very special island is inhabited only by knights and knaves. Knights always tell the truth, and "
            "knaves always lie. ")
COMMUTATIVE = {"and", "or", "<=>"}


def relabel(statement, perm):
    """The statement with person i renamed perm[i], commutative operands sorted (as canonical JSON text)."""
    op = statement[0]
    if op in ("telling-truth", "lying"):
        return json.dumps([op, perm[statement[1]]])
    operands = [relabel(s, perm) for s in statement[1:]]
    if op in COMMUTATIVE:
        operands.sort()
    return "[" + json.dumps(op) + "," + ",".join(operands) + "]"


def structure_key(record):
    statements = record["statements"]
    n = len(statements)
    best = None
    for perm in itertools.permutations(range(n)):
        reordered = [None] * n
        for speaker, statement in enumerate(statements):
            reordered[perm[speaker]] = relabel(statement, perm)
        key = "[" + ",".join(reordered) + "]"
        best = key if best is None or key < best else best
    return best


QUESTION = " So who is a knight and who is a knave?"


def short_prompt(record):
    quiz = record["quiz"]
    body = quiz[len(PREAMBLE):] if quiz.startswith(PREAMBLE) else quiz
    body = body[:-len(QUESTION)] if body.endswith(QUESTION) else body
    people = " ".join(f"({i}) {name}" for i, name in enumerate(record["names"], 1))
    return "User: " + body + " Who is a knight and who is a knave: " + people + "?\nAssistant: <think>"


SYMBOLS = {"and": "&", "or": "|", "->": ">", "<=>": "="}


def formula(statement):
    """Compact text of a statement over people numbered from 1: "2N" (2 is a knave), "(1K&2K)", "!1K", "(1K>2N)"."""
    op = statement[0]
    if op in ("telling-truth", "lying"):
        return f"{statement[1] + 1}{'K' if op == 'telling-truth' else 'N'}"
    if op == "not":
        return "!" + formula(statement[1])
    return "(" + SYMBOLS[op].join(formula(s) for s in statement[1:]) + ")"


def truth(statement, knights):
    op = statement[0]
    if op in ("telling-truth", "lying"):
        return knights[statement[1]] == (op == "telling-truth")
    values = [truth(s, knights) for s in statement[1:]]
    if op == "not":
        return not values[0]
    if op == "and":
        return all(values)
    if op == "or":
        return any(values)
    if op == "->":
        return (not values[0]) or values[1]
    return values[0] == values[1]


def case_trace(record):
    """A worked case analysis for the think block: each statement as a formula, then every assignment (K = knight,
    N = knave) with the truth value of each statement and whether it is consistent:
        " 1:2N 2:(1K&2K). KK:ff no KN:tf ok NK:ft no NN:ff no"."""
    statements = record["statements"]
    n = len(statements)
    lines = [" " + " ".join(f"{i + 1}:{formula(s)}" for i, s in enumerate(statements)) + "."]
    for case in itertools.product((True, False), repeat=n):
        values = [truth(s, case) for s in statements]
        ok = all(v == k for v, k in zip(values, case))
        lines.append("".join("K" if k else "N" for k in case) + ":" + "".join("t" if v else "f" for v in values) +
                     (" ok" if ok else " no"))
    return " ".join(lines)


def local_eval(statement, knights):
    """The statement with each atom's value written after it, and each operator's value after its closing
    parenthesis: under 1=K, 2=N, "(1K&2N)" reads "(1Kt&2Nt)t", "!1K" reads "!1Ktf". Every value is one lookup (a
    person's role in the candidate line) or one operator applied to the two values just written."""
    op = statement[0]
    value = truth(statement, knights)
    if op in ("telling-truth", "lying"):
        return formula(statement) + ("t" if value else "f")
    if op == "not":
        return "!" + local_eval(statement[1], knights) + ("t" if value else "f")
    inner = SYMBOLS[op].join(local_eval(s, knights) for s in statement[1:])
    return "(" + inner + ")" + ("t" if value else "f")


def local_trace(record):
    """A case analysis that keeps each step local: the statements as formulas, then the candidate assignments in
    order (all knights first), each written as "1K2N3K:"; for each speaker in turn, the speaker with their role in
    the candidate, the statement evaluated atom by atom (local_eval), and "v" when the value agrees with the role or
    "x" when it does not, which ends that candidate. The first candidate where every speaker agrees is the solution
    (puzzles have exactly one), and it is marked "ok":
        " 1:(1K=2K) 2:(1N&2K). 1K2K: 1K (1Kt=2Kt)t v 2K (1Nf&2Kt)f x. 1K2N: 1K (1Kt=2Nf)f x. 1N2K: 1N (1Nt=2Kf)f
          v 2K (1Nt&2Kt)t v ok." """
    statements = record["statements"]
    n = len(statements)
    parts = [" " + " ".join(f"{i + 1}:{formula(s)}" for i, s in enumerate(statements)) + "."]
    for case in itertools.product((True, False), repeat=n):
        roles = ["K" if k else "N" for k in case]
        steps = []
        ok = True
        for i, s in enumerate(statements):
            agrees = truth(s, case) == case[i]
            steps.append(f"{i + 1}{roles[i]} {local_eval(s, case)} {'v' if agrees else 'x'}")
            if not agrees:
                ok = False
                break
        header = "".join(f"{i + 1}{r}" for i, r in enumerate(roles)) + ":"
        parts.append(header + " " + " ".join(steps) + (" ok." if ok else "."))
        if ok:
            break
    return " ".join(parts)


TRACES = {"": lambda record: "", "cases": case_trace, "local": local_trace}


def short_answer(record, trace=""):
    think = TRACES[trace](record)
    return think + " </think> <answer> " + record["solution_text_format"] + " </answer>"


def read_jsonl(paths):
    records = []
    for path in paths:
        with open(path) as f:
            records.extend(json.loads(line) for line in f if line.strip())
    return records


def keep_new(records, seen_keys, seen_quizzes):
    """Records whose structure and quiz are not yet seen, marking them seen; and the number removed."""
    kept = []
    for r in records:
        key = structure_key(r)
        if key in seen_keys or r["quiz"] in seen_quizzes:
            continue
        seen_keys.add(key)
        seen_quizzes.add(r["quiz"])
        kept.append(r)
    return kept, len(records) - len(kept)


def write_split(records, path, trace):
    with open(path, "w") as f:
        for i, r in enumerate(records):
            r = dict(r, prompt=short_prompt(r), answer=short_answer(r, trace), index=i)
            f.write(json.dumps(r) + "\n")


def by_people(records):
    counts = collections.Counter(len(r["names"]) for r in records)
    return " ".join(f"{n}p:{counts[n]}" for n in sorted(counts))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--test", nargs="+", required=True, help="raw test records (ppo data kk)")
    parser.add_argument("--val", nargs="+", required=True, help="raw validation records")
    parser.add_argument("--train", nargs="+", required=True, help="raw training records (several seeds allowed)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--trace", nargs="?", const="cases", default="", choices=["cases", "local"],
                        help="answers reason in the think block: a case analysis over every assignment (cases: "
                             "one truth value per statement; local: atom by atom, stopping at the solution)")
    args = parser.parse_args()

    test_keys, test_quizzes = set(), set()
    test, test_dropped = keep_new(read_jsonl(args.test), test_keys, test_quizzes)
    held_keys, held_quizzes = set(test_keys), set(test_quizzes)
    val, val_dropped = keep_new(read_jsonl(args.val), held_keys, held_quizzes)
    # Train may repeat a structure under other names (augmentation), but never a held-out one or the same quiz.
    train, train_quizzes = [], set()
    train_raw = read_jsonl(args.train)
    for r in train_raw:
        if structure_key(r) in held_keys or r["quiz"] in train_quizzes:
            continue
        train_quizzes.add(r["quiz"])
        train.append(r)

    # The check, recomputed from the kept records: nothing of test in val or train, nothing of val in train.
    test_keys = {structure_key(r) for r in test}
    val_keys = {structure_key(r) for r in val}
    train_keys = [structure_key(r) for r in train]
    test_quizzes = {r["quiz"] for r in test}
    leaked = [r["quiz"] for r in val if r["quiz"] in test_quizzes or structure_key(r) in test_keys]
    leaked += [r["quiz"] for r, key in zip(train, train_keys)
               if r["quiz"] in test_quizzes or key in test_keys or key in val_keys]
    if leaked:
        print(f"error: {len(leaked)} train/val puzzles are held-out puzzles, e.g. {leaked[0]!r}", file=sys.stderr)
        return 1

    os.makedirs(args.out, exist_ok=True)
    for name, records in (("train", train), ("val", val), ("test", test)):
        write_split(records, os.path.join(args.out, name + ".jsonl"), args.trace)
    train_structures = len(set(train_keys))
    print(f"test  {len(test):6d} puzzles ({by_people(test)}), {test_dropped} repeated structures dropped")
    print(f"val   {len(val):6d} puzzles ({by_people(val)}), {val_dropped} test or repeated structures dropped")
    print(f"train {len(train):6d} puzzles ({by_people(train)}; {train_structures} distinct structures), "
          f"{len(train_raw) - len(train)} test/val structures or repeated quizzes dropped")
    print("disjoint: no test quiz text or puzzle structure (up to names, speaker order and operand order) "
          "in train or val")
    return 0


if __name__ == "__main__":
    sys.exit(main())
