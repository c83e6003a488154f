"""Parquet files of a few kilobytes that declare lists of tens to hundreds of millions of elements (run-length
encoded definition levels), for the reader's bound on a record's decoded size: the fuzz seeds
tests/fuzz/parquet/huge_*.parquet, which tests/app/test_hostile_state.cpp also reads through `ppo train` (beside
huge_page.parquet, which fuzz_parquet found: a page header that declares a page of 1.8 GB; not made here).

    python huge_lists_parquet.py OUT_DIR

  huge_null_list       1 row in 1 row group: a `reverse` record (prompt "12>", answer "21", ground_truth {"target":
                       "21"}, difficulty 2) and extra list<null> of 300,000,000 nulls.
  huge_int_nulls       1 row in 1 row group: the same with list<int64> of 20,000,000 nulls.
  huge_list_in_group   64 rows in 1 row group: row 5's list<null> holds 2,000,000 nulls (32 MB as JSON values), the
                       others none, so the row group declares fewer values than 64 records may hold, Arrow decodes it
                       in a few megabytes, and only that record is too large.
"""
import sys

import pyarrow as pa
import pyarrow.parquet as pq


def lists(lengths, values):
    offsets = [0]
    for n in lengths:
        offsets.append(offsets[-1] + n)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)


def write(path, rows, extra):
    table = pa.table({"prompt": pa.array(["12>"] * rows), "answer": pa.array(["21"] * rows),
                      "ground_truth": pa.array([{"target": "21"}] * rows), "difficulty": pa.array([2] * rows),
                      "extra": extra})
    pq.write_table(table, path, row_group_size=rows)


def main(out):
    write(f"{out}/huge_null_list.parquet", 1, lists([300_000_000], pa.nulls(300_000_000)))
    write(f"{out}/huge_int_nulls.parquet", 1, lists([20_000_000], pa.nulls(20_000_000, pa.int64())))
    lengths = [0] * 64
    lengths[5] = 2_000_000
    write(f"{out}/huge_list_in_group.parquet", 64, lists(lengths, pa.nulls(2_000_000)))


if __name__ == "__main__":
    main(sys.argv[1])
