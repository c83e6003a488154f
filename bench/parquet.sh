#!/usr/bin/env bash
# Reading a 200,000-row veRL-layout data file: ppo.cpp's Parquet reader (build/bench_data) against pandas
# (read_parquet + to_dict, bench/parquet_read.py) on the same file, and against ppo.cpp's JSONL reader on the same
# records; rows/s and memory. Two Parquet files: pandas' default (one row group) and row groups of 10,000 rows.
#   bash bench/parquet.sh [--build DIR] [--rows N] [--repeat K]        (defaults: build, 200000, 3)
# Run it with the cores to itself. Files go to a temporary folder, removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build rows=200000 repeat=3
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    *) echo "bench/parquet.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
python=.venv-ref/bin/python
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$python" bench/parquet_read.py write "$dir/one_group.parquet" --rows "$rows" --jsonl "$dir/rows.jsonl" >/dev/null
"$python" bench/parquet_read.py write "$dir/groups_10k.parquet" --rows "$rows" --row-group-size 10000 >/dev/null
sync  # the files just written reach the disk before any timing (writeback beside a read slowed it 1.3x)
ls -l "$dir" | awk 'NR > 1 {print "file " $NF ": " $5 " bytes"}'
for file in one_group.parquet groups_10k.parquet; do
  "$build/bench_data" "$dir/$file" --repeat "$repeat"
  "$python" bench/parquet_read.py pandas "$dir/$file" --repeat "$repeat"
done
"$build/bench_data" "$dir/rows.jsonl" --repeat "$repeat"
