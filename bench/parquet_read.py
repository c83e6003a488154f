#!/usr/bin/env python3
"""Reading a veRL dataset file: pandas' side of the comparison with ppo.cpp's Parquet reader.

    python bench/parquet_read.py write FILE.parquet [--rows 200000] [--jsonl FILE.jsonl] [--seed 0]
                                     [--row-group-size N]
    python bench/parquet_read.py pandas FILE.parquet [--repeat 3]

write: a GSM8K-style file in veRL's layout (examples/data_preprocess/gsm8k.py: data_source, prompt [{role,
content}], ability, reward_model {style, ground_truth}, extra_info {split, index, answer, question}) of --rows rows
with varying synthetic questions (about 300-600 bytes of text per row), by pandas' df.to_parquet with its defaults
(snappy, pyarrow's default maximum row group size, or --row-group-size rows per group); --jsonl also writes the JSONL that pandas makes of the same
frame (orient="records", lines=True, force_ascii=False), the input ppo.cpp reads without Parquet.

pandas: what a Python trainer does to get the rows, pd.read_parquet(FILE) then df.to_dict(orient="records") (veRL's
RLHFDataset reads with datasets/pandas and indexes rows as dicts), timed together, best of --repeat. Prints one JSON
line: {"impl": "pandas", "rows", "seconds" (best), "rows_per_s", "rss_before_mib" (resident memory before the first
read, the interpreter and the libraries), "peak_rss_mib" (getrusage ru_maxrss: the process's peak), "rss_growth_mib"
(peak minus before: what reading and holding the records cost)}; the peak is the first read's.

ppo.cpp's side is build/bench_data (bench/bench_data.cpp), which reads the same file into its samples as training
does and prints the same fields; bench/parquet.sh runs both on the same files.
"""
import argparse
import json
import os
import random
import resource
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import verl_parquet  # noqa: E402  (the GSM8K-style record of the [ref] fixtures)

NAMES = ["Tom", "Ana", "Zoë", "Priya", "Omar", "Lena", "Kenji", "Sofía", "Grace", "Malik", "Yuki", "Ibrahim"]
ITEMS = ["apples", "pencils", "marbles", "stickers", "books", "cookies", "stamps", "seashells", "coins", "cards"]
PLACES = ["at the market", "from a friend", "at school", "online", "at the fair", "from the shop next door"]


def row(i, rng):
    name, item, place = rng.choice(NAMES), rng.choice(ITEMS), rng.choice(PLACES)
    return verl_parquet.gsm8k_record(i, name, item, rng.randint(2, 500), rng.randint(2, 500), rng.randint(1, 50),
                                     place=place)


def rss_mib():  # resident memory now (Linux)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def write(args):
    import pandas as pd

    rng = random.Random(args.seed)
    df = pd.DataFrame([row(i, rng) for i in range(args.rows)])
    df.to_parquet(args.file, row_group_size=args.row_group_size)
    info = {"file": args.file, "rows": args.rows, "bytes": os.path.getsize(args.file)}
    if args.jsonl:
        df.to_json(args.jsonl, orient="records", lines=True, force_ascii=False)
        info["jsonl_bytes"] = os.path.getsize(args.jsonl)
    print(json.dumps(info))


def read_pandas(args):
    import pandas as pd

    before = rss_mib()
    best, rows, peak = None, 0, None
    for _ in range(args.repeat):
        start = time.perf_counter()
        records = pd.read_parquet(args.file).to_dict(orient="records")
        seconds = time.perf_counter() - start
        rows = len(records)
        best = seconds if best is None else min(best, seconds)
        if peak is None:  # the first read's peak: later ones add the allocator's leftovers
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        del records
    print(json.dumps({"impl": "pandas", "file": args.file, "rows": rows, "seconds": round(best, 4),
                      "rows_per_s": round(rows / best), "rss_before_mib": round(before, 1),
                      "peak_rss_mib": round(peak, 1), "rss_growth_mib": round(peak - before, 1)}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    w = sub.add_parser("write")
    w.add_argument("file")
    w.add_argument("--rows", type=int, default=200000)
    w.add_argument("--jsonl")
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--row-group-size", type=int, default=None)  # None: pyarrow's default (one group up to 1Mi rows)
    p = sub.add_parser("pandas")
    p.add_argument("file")
    p.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.mode == "write":
        write(args)
    else:
        if args.repeat < 1:
            sys.exit("parquet_read.py: --repeat must be at least 1")
        read_pandas(args)


if __name__ == "__main__":
    main()
