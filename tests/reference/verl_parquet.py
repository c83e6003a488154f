"""veRL-layout Parquet fixtures for ppo.cpp's Parquet reader, each paired with the JSONL that pandas writes from the
same frame (the reference: the C++ test reads both files and demands equal records, value for value).

    python verl_parquet.py OUT_DIR
    python verl_parquet.py convert IN OUT       (IN.jsonl -> OUT.parquet or IN.parquet -> OUT.jsonl, with pandas)

For each NAME below, OUT_DIR/NAME.parquet is written by the real tool named and OUT_DIR/NAME.jsonl by
df.to_json(path, orient="records", lines=True, force_ascii=False, double_precision=15) from the same frame. A parquet
null is JSON null; a struct field is present in every row (explicit None where a null is wanted); floats are exactly
representable in binary, so the 15-digit JSON text is the value itself.

  gsm8k       40 rows laid out as veRL's examples/data_preprocess/gsm8k.py lays them out; synthetic questions.
              Parquet: datasets.Dataset.from_list(rows).to_parquet (snappy, datasets' defaults), as veRL writes it.
              JSONL: ds.to_pandas().to_json (the frame datasets itself hands to pandas; its lists are numpy arrays,
              which pandas writes as JSON arrays).
  kk          30 Knights-and-Knaves rows in Logic-RL's layout (examples/data_preprocess/kk.py): ground_truth is a
              struct {solution_text_format, statements}, statements a Python-repr string as in the K&K dataset.
              pandas df.to_parquet(compression="zstd", row_group_size=7): 5 row groups.
  types       25 rows, prompt a plain string; extra_info carries one field per Arrow type (int32, int64, float32,
              float64, bool, string, list<int64>, list<struct<k, v>> of lengths 0-3, a nested struct), plus a top-level
              large_string "note" and a dictionary<int32, string> "category". Built as a pa.Table with an explicit
              schema, pyarrow.parquet.write_table(compression="snappy", row_group_size=10); JSONL from
              table.to_pandas() (checked here against table.to_pylist()).
  nulls       20 rows with nulls: extra_info fields null in some rows (answer, index, score, tags), extra_info
              itself null in row 5, a struct ground_truth {"answer", "unit"} whose unit is sometimes null; the prompt
              is never null (a system message leads it in some rows). pandas writer, snappy.
  bad_rows    5 rows, row 3 (0-based) with reward_model.ground_truth null (the reader must reject that row).
  no_prompt   5 rows with data_source, reward_model and extra_info but no prompt column.
  unsupported 5 rows whose extra_info has a timestamp[ns] field "when" (the reader must name the column and type).
              Its JSONL is pandas' too, but pandas writes the timestamps as epoch milliseconds: not the parquet value.

Also not_parquet.parquet (a JSON text file) and truncated.parquet (the first 60% of gsm8k.parquet's bytes).
Prints one line per file written.

convert is how a pandas user moves a file between the two forms: pd.read_json(lines=True).to_parquet() (snappy), or
pd.read_parquet() and the to_json above. The tests convert files ppo.cpp wrote, and files it reads both ways.

Every JSONL but unsupported's is checked here against pyarrow.parquet.read_table(NAME.parquet).to_pylist(), strictly
(an int must stay an int, a float a float, a bool a bool; -0.0 is not 0.0), and the script exits 1 on a difference.
JSON key order is the frame's (insertion order) and may differ from the parquet's field order, which pyarrow's
inference sorts; records are equal as JSON objects. pandas 3 writes its top-level str columns as large_string (nested
strings stay string), so the pandas fixtures carry both.
"""
import json
import math
import os
import sys

import datasets
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'  # veRL's gsm8k.py
NAMES = ["Tom", "Ana", "Zoë", "Priya", "Omar", "Lena", "Kenji", "Sofía"]
ITEMS = ["apples", "pencils", "marbles", "stickers", "books", "cookies"]


def jsonl(df, path):
    df.to_json(path, orient="records", lines=True, force_ascii=False, double_precision=15)


def plain(value):  # numpy scalars and arrays to plain Python, for comparing with json.loads
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def same(a, b):  # JSON equality without Python's 1 == 1.0 == True: an int must stay an int, a bool a bool
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return a == b


def check(path, expected):  # the JSONL's records must be exactly the parquet's
    with open(path, encoding="utf-8") as f:
        got = [json.loads(line) for line in f if line.strip()]
    expected = [plain(r) for r in expected]
    if len(got) != len(expected):
        sys.exit(f"verl_parquet.py: {path} has {len(got)} records, its parquet {len(expected)}")
    for i, (a, b) in enumerate(zip(got, expected)):
        if not same(a, b):
            sys.exit(f"verl_parquet.py: {path} differs from its parquet at row {i}:\n  {a}\n  {b}")


def gsm8k_row(i, split="train"):
    a, b, c = 3 + i % 7, 5 + (i * 3) % 11, 2 + i % 4
    return gsm8k_record(i, NAMES[i % len(NAMES)], ITEMS[i % len(ITEMS)], a, b, c, split)


def gsm8k_record(i, name, item, a, b, c, split="train", place=""):
    """A GSM8K-style record in veRL's layout: name has a items, buys b more (place), gives away c (bench/ uses it)."""
    question = (f"{name} has {a} {item} and buys {b} more{' ' + place if place else ''}. Then {name} gives away {c}"
                f"{' ' + item if place else ''}. How many {item} does {name} have{' left' if place else ''}?")
    total = a + b - c
    answer = (f"{name} has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} {item} after buying.\n"
              f"After giving away {c}, {name} has {a + b} - {c} = <<{a + b}-{c}={total}>>{total} {item}.\n"
              f"#### {total}")
    return {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": question + " " + INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(total)},
        "extra_info": {"split": split, "index": i, "answer": answer, "question": question},
    }


def gsm8k(out):
    ds = datasets.Dataset.from_list([gsm8k_row(i) for i in range(40)])
    ds.to_parquet(os.path.join(out, "gsm8k.parquet"))
    jsonl(ds.to_pandas(), os.path.join(out, "gsm8k.jsonl"))
    return ds.to_list()


KK_NAMES = ["Zoey", "Oliver", "Jack", "Sophia", "Mia", "Ethan", "Ava", "Liam"]


def kk_row(i):
    n = 2 + i % 3
    people = [KK_NAMES[(i + j) % len(KK_NAMES)] for j in range(n)]
    knight = [(i >> j) & 1 == 1 for j in range(n)]
    statements = []
    lines = []
    for j in range(n):
        other = (j + 1) % n
        kind = "telling-truth" if knight[other] == knight[j] else "lying"
        statements.append([kind, other])
        says = "is a knight" if knight[other] == knight[j] else "is a knave"
        lines.append(f'{people[j]} says, "{people[other]} {says}."')
    quiz = (f"A very special island is inhabited only by knights and knaves. Knights always tell the truth, and "
            f"knaves always lie. You meet {n} inhabitants: {', '.join(people[:-1])}, and {people[-1]}. "
            + " ".join(lines) + " So who is a knight and who is a knave?")
    solution = "\n".join(f"({j + 1}) {people[j]} is a {'knight' if knight[j] else 'knave'}" for j in range(n))
    return {
        "data_source": "kk_logic",
        "prompt": [{"role": "user", "content": quiz}],
        "ability": "logic",
        "reward_model": {"style": "rule",
                         "ground_truth": {"solution_text_format": solution, "statements": repr(statements)}},
        "extra_info": {"split": "train", "index": i},
    }


def kk(out):
    df = pd.DataFrame([kk_row(i) for i in range(30)])
    path = os.path.join(out, "kk.parquet")
    df.to_parquet(path, compression="zstd", row_group_size=7)
    assert pq.ParquetFile(path).num_row_groups > 1
    jsonl(df, os.path.join(out, "kk.jsonl"))
    return df.to_dict(orient="records")


TYPES_SCHEMA = pa.schema([
    ("data_source", pa.string()),
    ("prompt", pa.string()),
    ("ability", pa.string()),
    ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
    ("extra_info", pa.struct([
        ("i32", pa.int32()),
        ("index", pa.int64()),
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("flag", pa.bool_()),
        ("split", pa.string()),
        ("ints", pa.list_(pa.int64())),
        ("steps", pa.list_(pa.struct([("k", pa.string()), ("v", pa.int64())]))),
        ("meta", pa.struct([("source", pa.string()), ("depth", pa.struct([("level", pa.int32())]))])),
    ])),
    ("note", pa.large_string()),
    ("category", pa.dictionary(pa.int32(), pa.string())),
])


def types(out):
    rows = []
    for i in range(25):
        rows.append({
            "data_source": "openai/gsm8k",
            "prompt": f"What is {i} + 7 - {i}? Answer with a number. ✓",
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "7"},
            "extra_info": {
                "i32": -2147483648 if i == 0 else 2147483647 if i == 1 else i * 1000 - 7,
                "index": 9007199254740993 if i == 2 else -(2 ** 62) if i == 3 else i,  # beyond a double's 53 bits
                "f32": [0.5, -3.0, 2.25, 1024.125, -0.0078125][i % 5],
                "f64": [2.25, -3.0, 0.1, 1e300, -1.5e-300, 123456789.125][i % 6],  # 0.1 has 17 digits: see below
                "flag": i % 3 == 0,
                "split": "train" if i % 2 else "test",
                "ints": list(range(i % 4)) + [-(i ** 3)],
                "steps": [{"k": "abc"[j], "v": j + i} for j in range(i % 4)],
                "meta": {"source": "x" if i % 2 else "y/z", "depth": {"level": i % 5}},
            },
            "note": "line one\nline \"two\"\t" + "é" * (i % 3),
            "category": ["easy", "medium", "hard"][i % 3],
        })
    # double_precision=15 writes 15 significant digits: 0.1 -> 0.1 (the same double on reading), 1e300 and
    # -1.5e-300 likewise; 123456789.125 has 12 digits. All round-trip exactly.
    table = pa.Table.from_pylist(rows, schema=TYPES_SCHEMA)
    path = os.path.join(out, "types.parquet")
    pq.write_table(table, path, compression="snappy", row_group_size=10)
    jsonl(table.to_pandas(), os.path.join(out, "types.jsonl"))
    return table.to_pylist()


def nulls(out):
    rows = []
    for i in range(20):
        row = gsm8k_row(i)
        if i % 4 == 1:  # a system message in some rows; every message's role and content stay non-null
            row["prompt"] = [{"role": "system", "content": "Be brief."}] + row["prompt"]
        row["reward_model"]["ground_truth"] = {"answer": row["reward_model"]["ground_truth"],
                                               "unit": None if i % 3 else "apples"}
        extra = row["extra_info"]
        extra["answer"] = None if i % 2 else extra["answer"]
        extra["index"] = None if i == 7 else i  # an int64 field with a null (the object column keeps the ints)
        extra["score"] = None if i % 5 == 0 else (i - 10) * 0.25
        extra["tags"] = None if i % 6 == 0 else ["t%d" % j for j in range(i % 3)]
        row["extra_info"] = None if i == 5 else extra
        rows.append(row)
    df = pd.DataFrame(rows)
    df.to_parquet(os.path.join(out, "nulls.parquet"), compression="snappy")
    jsonl(df, os.path.join(out, "nulls.jsonl"))
    return df.to_dict(orient="records")


def pandas_pair(out, name, rows):  # NAME.parquet (pandas' defaults) and NAME.jsonl of one frame
    df = pd.DataFrame(rows)
    df.to_parquet(os.path.join(out, name + ".parquet"))
    jsonl(df, os.path.join(out, name + ".jsonl"))
    return df.to_dict(orient="records")


def bad_rows(out):
    rows = [gsm8k_row(i) for i in range(5)]
    rows[3]["reward_model"]["ground_truth"] = None
    return pandas_pair(out, "bad_rows", rows)


def no_prompt(out):
    rows = [gsm8k_row(i) for i in range(5)]
    for row in rows:
        del row["prompt"], row["ability"]
    return pandas_pair(out, "no_prompt", rows)


def unsupported(out):
    rows = [gsm8k_row(i) for i in range(5)]
    for i, row in enumerate(rows):
        row["extra_info"]["when"] = pd.Timestamp(2024, 1, 1 + i, 12, 30, 0, 1, nanosecond=7)
    df = pd.DataFrame(rows)
    # pyarrow infers timestamp[us] from Timestamp objects inside dicts: give pandas' writer the schema with ns.
    schema = pa.Schema.from_pandas(df, preserve_index=False)
    extra = schema.field("extra_info").type
    fields = [f.with_type(pa.timestamp("ns")) if f.name == "when" else f for f in extra.fields]
    schema = schema.set(schema.get_field_index("extra_info"), pa.field("extra_info", pa.struct(fields)))
    path = os.path.join(out, "unsupported.parquet")
    df.to_parquet(path, schema=schema)
    when = pq.read_schema(path).field("extra_info").type.field("when").type
    assert when == pa.timestamp("ns"), when
    jsonl(df, os.path.join(out, "unsupported.jsonl"))  # timestamps as epoch milliseconds: not compared


def convert(source, target):
    if source.endswith(".parquet"):
        jsonl(pd.read_parquet(source), target)
    else:
        pd.read_json(source, lines=True, dtype=False).to_parquet(target)
    print(f"{target}: {os.path.getsize(target)} bytes")


def main():
    datasets.disable_progress_bars()
    if len(sys.argv) == 4 and sys.argv[1] == "convert":
        return convert(sys.argv[2], sys.argv[3])
    if len(sys.argv) != 2:
        sys.exit("usage: verl_parquet.py OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, make in [("gsm8k", gsm8k), ("kk", kk), ("types", types), ("nulls", nulls), ("bad_rows", bad_rows),
                       ("no_prompt", no_prompt), ("unsupported", unsupported)]:
        records = make(out)
        parquet, lines = os.path.join(out, name + ".parquet"), os.path.join(out, name + ".jsonl")
        if records is not None:
            check(lines, records)
            check(lines, pq.read_table(parquet).to_pylist())
        for path in (parquet, lines):
            print(f"{path}: {os.path.getsize(path)} bytes")
    path = os.path.join(out, "not_parquet.parquet")
    with open(path, "w") as f:
        f.write('{"data_source": "openai/gsm8k", "prompt": "this is JSON, not Parquet"}\n')
    print(f"{path}: {os.path.getsize(path)} bytes")
    with open(os.path.join(out, "gsm8k.parquet"), "rb") as f:
        data = f.read()
    path = os.path.join(out, "truncated.parquet")
    with open(path, "wb") as f:
        f.write(data[:len(data) * 6 // 10])
    print(f"{path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
