#!/usr/bin/env python3
"""Checks that no source file includes one from a layer above its own, and that no files include each other in a
circle (ctest `layers`).

    python3 scripts/check_layers.py [REPO]
    python3 scripts/check_layers.py --self-test     (it must flag an upward and a sideways include in a made-up tree)

The layers, bottom to top, as the libraries of CMakeLists.txt link them:
    common  <-  text  <-  model, tasks, parallel  <-  decode  <-  rollout, records  <-  rl  <-  workers  <-  train  <-  app
A file may include its own folder and any folder strictly below it, never a sibling of the same rank (model, tasks
and parallel are independent of each other; so are rollout and records). bench/ sits beside app/ and tests/ sees
everything. Within a layer, no chain of includes may come back to the file it started from, and no two units (x.h
with x.cpp) may reach each other through their includes. Exits 1 listing every upward or sideways include and every
circle.
"""
import pathlib
import re
import sys
import tempfile

RANK = {"common": 0, "text": 1, "model": 2, "tasks": 2, "parallel": 2, "decode": 3, "rollout": 4, "records": 4,
        "rl": 5, "workers": 6, "train": 7, "app": 8, "bench": 8}
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


def unit_circles(repo):
    """Each set of two or more units (x.h with x.cpp) that reach each other through their includes, as sorted lists."""
    graph = {}
    for folder in RANK:
        for path in sorted((repo / folder).glob("*.[ch]*")):
            if path.suffix in (".h", ".cpp"):
                unit = path.relative_to(repo).with_suffix("").as_posix()
                targets = {t.rsplit(".", 1)[0] for t in INCLUDED_FILE.findall(path.read_text(encoding="utf-8"))}
                graph.setdefault(unit, set()).update(targets - {unit})
    order, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(unit):  # Tarjan's strongly connected components
        order[unit] = low[unit] = len(order)
        stack.append(unit)
        on_stack.add(unit)
        for target in graph.get(unit, ()):
            if target not in graph:
                continue
            if target not in order:
                visit(target)
                low[unit] = min(low[unit], low[target])
            elif target in on_stack:
                low[unit] = min(low[unit], order[target])
        if low[unit] == order[unit]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == unit:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for unit in sorted(graph):
        if unit not in order:
            visit(unit)
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
    problems += [f"units that include each other: {', '.join(c)}" for c in unit_circles(repo)]
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
             "rl/d.h": '#include "rl/e.h"\n', "rl/e.h": '#include "rl/d.h"\n',
             "rl/f.h": "", "rl/f.cpp": '#include "rl/f.h"\n#include "rl/g.h"\n',
             "rl/g.h": "", "rl/g.cpp": '#include "rl/g.h"\n#include "rl/f.h"\n'}
    expected = ["rl/a.cpp includes train/ (above rl/)", "model/b.h includes tasks/ (beside model/)",
                "a circle of includes: rl/d.h -> rl/e.h -> rl/d.h", "units that include each other: rl/d, rl/e",
                "units that include each other: rl/f, rl/g"]
    return self_test_on("check_layers", check, files, expected)


if __name__ == "__main__":
    sys.exit(main_of("check_layers", check, self_test, "upward or sideways includes or circles"))
