#!/usr/bin/env python3
"""Checks that no hand-written source file is over 600 lines and no function over 80 (ctest `sizes`).

    python3 scripts/check_sizes.py [REPO]
    python3 scripts/check_sizes.py --self-test     (it must flag a long file and a long function in a made-up tree)

Sources: the .h, .cpp and .cu files of the library folders, app/, bench/ and tests/ (generated tables excepted, see
GENERATED). A function is what .clang-format lays out as one: a definition whose signature starts at the margin of a
namespace (column 0) or of a class body (column 2), TEST_CASEs included, counted from its first line to its closing
brace at the same indentation. Exits 1 listing every file and function over its limit.
"""
import pathlib
import re
import sys

from check_layers import main_of, self_test_on

FOLDERS = ["common", "model", "tasks", "parallel", "rollout", "records", "rl", "workers", "train", "app", "bench",
           "tests"]
GENERATED = {"text/unicode_tables.h"}  # written by scripts/gen_unicode_tables.py
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
NOT_A_FUNCTION = re.compile(r"(namespace|class|struct|enum|union|extern|switch|if|for|while|do|else|try|catch|return)\b")


def functions(lines):
    """(first line index, line count, signature) of each function definition in `lines`."""
    i = 0
    while i < len(lines):
        line = lines[i]
        indent = len(line) - len(line.lstrip(" "))
        text = line.strip()
        starts = indent in (0, 2) and text[:1] != "" and (text[:1].isalpha() or text[:1] in "~_") and \
            "(" in text and not NOT_A_FUNCTION.match(text) and not text.endswith(";")
        if starts:
            j = i  # the line that opens the body: the signature may wrap over a few lines
            while j < min(len(lines), i + 8) and not lines[j].rstrip().endswith(("{", ";")):
                j += 1
            if j < len(lines) and lines[j].rstrip().endswith("{") and not lines[j].rstrip().endswith("= {"):
                close = " " * indent + "}"
                k = j + 1
                while k < len(lines) and not lines[k].startswith(close):
                    k += 1
                yield i, k - i + 1, text
                i = k + 1
                continue
        i += 1


def check(repo):
    problems, checked = [], 0
    for folder in FOLDERS:
        for path in sorted((repo / folder).rglob("*")):
            rel = path.relative_to(repo).as_posix()
            if path.suffix not in (".h", ".cpp", ".cu") or rel in GENERATED:
                continue
            checked += 1
            lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
            if len(lines) > MAX_FILE_LINES:
                problems.append(f"{rel}: {len(lines)} lines (at most {MAX_FILE_LINES})")
            for first, count, signature in functions(lines):
                if count > MAX_FUNCTION_LINES:
                    problems.append(f"{rel}:{first + 1}: a function of {count} lines (at most {MAX_FUNCTION_LINES}): "
                                    f"{signature[:80]}")
    return problems, checked


def self_test():
    body = "".join(f"  x += {i};\n" for i in range(85))
    short = "".join(f"  x += {i};\n" for i in range(20))
    files = {"rl/a.cpp": f"namespace ppo {{\n\nint f(int x) {{\n{body}  return x;\n}}\n\n}}  // namespace ppo\n",
             "model/b.h": "struct B {\n  int g(int x) const {\n" + short + "    return x;\n  }\n};\n" + "// filler\n" * 700,
             "tests/c.cpp": f'TEST_CASE("c", "[cpu]") {{\n{short}}}\nvoid h(int x,\n       int y) {{\n{body}}}\n'}
    expected = ["rl/a.cpp:3: a function of 88 lines (at most 80): int f(int x) {",
                "model/b.h: 726 lines (at most 600)",
                "tests/c.cpp:23: a function of 88 lines (at most 80): void h(int x,"]
    return self_test_on("check_sizes", check, files, expected)


if __name__ == "__main__":
    sys.exit(main_of("check_sizes", check, self_test, "over their limits"))
