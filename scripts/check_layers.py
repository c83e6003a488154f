#!/usr/bin/env python3
"""Checks that no source file includes one from a layer above its own, and that no files include each other in a
circle (ctest `layers`).

    python3 scripts/check_layers.py [REPO]
    python3 scripts/check_layers.py --self-test     (it must flag an upward and a sideways include in a made-up tree)

The layers, bottom to top, as the libraries of CMakeLists.txt link them:
    common  <-  model, tasks, parallel  <-  rollout, records  <-  rl  <-  workers  <-  train  <-  app
A file may include its own folder and any folder strictly below it, never a sibling of the same rank (model, tasks
and parallel are independent of each other; so are rollout and records). bench/ sits beside app/ and tests/ sees
everything. Within a layer, no chain of includes may come back to the file it started from. Exits 1 listing every
upward or sideways include and every circle.
"""
import pathlib
import re
import sys
import tempfile

RANK = {"common": 0, "model": 1, "tasks": 1, "parallel": 1, "rollout": 2, "records": 2, "rl": 3, "workers": 4,
        "train": 5, "app": 6, "bench": 6}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"', re.M)
INCLUDED_FILE = re.compile(r'^\s*#\s*include\s+"([a-z_]+/[^"]+)"', re.M)


def circles(repo):
    """Each circle of includes among the layers' files, as "a.h -> b.h -> a.h", found once."""
    graph = {}
    for folder in RANK:
        for path in sorted((repo / folder).glob("*.[ch]*")):
            if path.suffix in (".h", ".cpp"):
                graph[path.relative_to(repo).as_posix()] = INCLUDED_FILE.findall(path.read_text(encoding="utf-8"))
    found, state = [], {}  # state: 1 on the current chain, 2 done

    def visit(node, chain):
        state[node] = 1
        for target in graph.get(node, []):
            if state.get(target) == 1:
                found.append(" -> ".join(chain[chain.index(target):] + [target]))
            elif target in graph and not state.get(target):
                visit(target, chain + [target])
        state[node] = 2

    for node in graph:
        if not state.get(node):
            visit(node, [node])
    return found


def check(repo):
    problems, checked = [], 0
    for folder, rank in RANK.items():
        for path in sorted((repo / folder).glob("*.[ch]*")):
            if path.suffix not in (".h", ".cpp"):
                continue
            checked += 1
            for target in INCLUDE.findall(path.read_text(encoding="utf-8")):
                if target == folder:
                    continue
                if target not in RANK:
                    problems.append(f"{path.relative_to(repo)} includes {target}/, which is not a layer")
                elif RANK[target] >= rank:
                    where = "above" if RANK[target] > rank else "beside"
                    problems.append(f"{path.relative_to(repo)} includes {target}/ ({where} {folder}/)")
    problems += [f"a circle of includes: {c}" for c in circles(repo)]
    return problems, checked


def self_test_on(name, check, files, expected):
    """Runs `check` on a made-up tree of `files` (path: text); 0 when it reports exactly `expected`."""
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for path, text in files.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        problems, _ = check(root)
    ok = sorted(problems) == sorted(expected)
    print(f"{name} self-test: " + ("ok" if ok else f"expected {expected}, got {problems}"))
    return 0 if ok else 1


def main_of(name, check, self_test, what):
    """The command line of a check: `--self-test`, or the repository (default: this script's) to check."""
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    repo = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    problems, checked = check(repo)
    for p in problems:
        print("error: " + p)
    print(f"{name}: {checked} files, {len(problems)} {what}")
    return 1 if problems else 0


def self_test():
    files = {"rl/a.cpp": '#include "train/trainer.h"\n#include "rollout/rollout.h"\n',
             "model/b.h": '#include "tasks/task.h"\n', "train/c.cpp": '#include "rl/a.h"\n',
             "rl/d.h": '#include "rl/e.h"\n', "rl/e.h": '#include "rl/d.h"\n'}
    expected = ["rl/a.cpp includes train/ (above rl/)", "model/b.h includes tasks/ (beside model/)",
                "a circle of includes: rl/d.h -> rl/e.h -> rl/d.h"]
    return self_test_on("check_layers", check, files, expected)


if __name__ == "__main__":
    sys.exit(main_of("check_layers", check, self_test, "upward or sideways includes or circles"))
