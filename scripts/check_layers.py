#!/usr/bin/env python3
"""Checks that no source file includes one from a layer above its own (ctest `layers`).

    python3 scripts/check_layers.py [REPO]
    python3 scripts/check_layers.py --self-test     (it must flag an upward and a sideways include in a made-up tree)

The layers, bottom to top, as the libraries of CMakeLists.txt link them:
    common  <-  model, tasks, parallel  <-  rollout, records  <-  rl  <-  workers  <-  train  <-  app
A file may include its own folder and any folder strictly below it, never a sibling of the same rank (model, tasks
and parallel are independent of each other; so are rollout and records). bench/ sits beside app/ and tests/ sees
everything. Exits 1 listing every upward or sideways include.
"""
import pathlib
import re
import sys

RANK = {"common": 0, "model": 1, "tasks": 1, "parallel": 1, "rollout": 2, "records": 2, "rl": 3, "workers": 4,
        "train": 5, "app": 6, "bench": 6}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"', re.M)


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
    return problems, checked


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for name, text in {"rl/a.cpp": '#include "train/trainer.h"\n#include "rollout/rollout.h"\n',
                           "model/b.h": '#include "tasks/task.h"\n', "train/c.cpp": '#include "rl/a.h"\n'}.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        problems, _ = check(root)
    expected = ["rl/a.cpp includes train/ (above rl/)", "model/b.h includes tasks/ (beside model/)"]
    ok = sorted(problems) == sorted(expected)
    print("check_layers self-test: " + ("ok" if ok else f"expected {expected}, got {problems}"))
    return 0 if ok else 1


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    repo = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    problems, checked = check(repo)
    for p in problems:
        print("error: " + p)
    print(f"check_layers: {checked} files, {len(problems)} upward or sideways includes")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
