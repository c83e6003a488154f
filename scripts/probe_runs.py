#!/usr/bin/env python3
"""A hostile-input probe of the run surfaces: a checkpoint's batch in flight (rollout ranks, one step off-policy),
metrics that are NaN or infinite between the roles, text that is not whole UTF-8, keys given twice in a config file,
safetensors shapes whose sizes overflow, tokenizers without their EOS, keys a subcommand does not use, and a rank
stopped before MPI_Init (docs/reliability.md gives its counts).

    python3 scripts/probe_runs.py [--binary build/ppo] [--families a,b,...] [--seed N]

Each input states what it should do, as in scripts/probe_hostile.py (whose Probe it uses): `refuse` (exit 2 with one
`error:` line naming the file, field, key or flag, no backtrace, nothing already written changed) or `run` (exit 0);
the UTF-8 family also needs every line printed to be whole UTF-8 (and each --jsonl line JSON). Prints a line per
finding and a table of counts per family; exits 1 when there are findings.
"""
import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_hostile import NAMED, QUIET, SOURCE, TINY, probe_families, read_header, write_header  # noqa: E402

MPIRUN = ("mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np")
NAMED.update({"in_flight": "rollout_batch.safetensors", "twice": "given twice", "shapes": "model.safetensors",
              "tokens": "eos_token"})
DTYPES = {"I64": ("q", 8), "F32": ("f", 4)}


# ---- a batch in flight: rollout_batch.safetensors of a run at async.max_staleness=1 ----
def read_tensors(path):
    header, data = read_header(path)
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        code, size = DTYPES[info["dtype"]]
        values = list(struct.unpack(f"<{(end - begin) // size}{code}", data[begin:end]))
        tensors[name] = (info["dtype"], list(info["shape"]), values)
    return tensors, meta


def write_tensors(path, tensors, meta):
    header, data = {"__metadata__": meta}, b""
    for name in sorted(tensors):
        dtype, shape, values = tensors[name]
        code, _ = DTYPES[dtype]
        raw = struct.pack(f"<{len(values)}{code}", *[int(v) if code == "q" else float(v) for v in values])
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    write_header(path, header, data)


def in_flight(p, rng):
    run = os.path.join(p.work, "in_flight")
    roles = ["parallel.rollout_ranks=1", "async.max_staleness=1", "trainer.save_freq=1"]
    status, output = p.run(["train"] + TINY + QUIET + roles + [f"trainer.output_dir={run}",
                                                                 "trainer.total_training_steps=2"],
                           prefix=MPIRUN + ("3",))
    if status != 0:
        sys.exit("probe_runs: the setup run failed:\n" + output)
    checkpoint = run + "/checkpoints/global_step_2"
    path = checkpoint + "/rollout_batch.safetensors"
    resume = ["train"] + TINY + QUIET + roles + [f"trainer.output_dir={run}", "trainer.total_training_steps=2"]
    original = open(path, "rb").read()
    # Under the manifest: another step's batch, a flipped byte, a deleted file.
    for name, change in [("step_1_batch", lambda: shutil.copy(run + "/checkpoints/global_step_1/rollout_batch"
                                                                     ".safetensors", path)),
                         ("flipped_byte", lambda: open(path, "wb").write(original[:-3] + bytes([original[-3] ^ 1]) +
                                                                         original[-2:])),
                         ("deleted", lambda: os.remove(path))]:
        change()
        p.check("in_flight", name, resume, "refuse", watched=run + "/checkpoints", prefix=MPIRUN + ("3",))
        open(path, "wb").write(original)
    p.check("in_flight", "unchanged", resume, "run", prefix=MPIRUN + ("3",))
    # Without the manifest (trainer.accept_checkpoints_without_manifest=true): each field and the description read.
    manifest = open(checkpoint + "/manifest.json").read()
    os.remove(checkpoint + "/manifest.json")
    unverified = resume + ["trainer.accept_checkpoints_without_manifest=true"]
    tensors, meta = read_tensors(path)
    edits = []
    for field in sorted(tensors):
        edits.append((f"{field}/removed", lambda t, m, f=field: t.pop(f)))
        edits.append((f"{field}/other_dtype", lambda t, m, f=field: t.__setitem__(
            f, ("F32" if t[f][0] == "I64" else "I64", t[f][1], t[f][2]))))
        edits.append((f"{field}/row_dropped", lambda t, m, f=field: t.__setitem__(
            f, (t[f][0], [t[f][1][0] - 1] + t[f][1][1:], t[f][2][:len(t[f][2]) * (t[f][1][0] - 1) // t[f][1][0]]))))
        edits.append((f"{field}/flattened", lambda t, m, f=field: t.__setitem__(
            f, (t[f][0], [len(t[f][2])] if len(t[f][1]) == 2 else [t[f][1][0], 1], t[f][2]))))
    edits.append(("extra_field", lambda t, m: t.__setitem__("values", ("F32", [64], [0.0] * 64))))
    delivery = json.loads(meta["delivery"])
    for key, values in [("policy_version", [0, 2, -1, 2 ** 62, "1", None, 1.5]),
                        ("gen_batches", [0, 2, 99, -1, "3", None]),
                        ("metrics", [[], "x", None, {"a": "high"}, {"a": [1]}, {"a": None}])]:
        for value in values:
            def edit(t, m, key=key, value=value):
                d = dict(delivery)
                if value is None and key != "metrics":
                    d.pop(key)
                else:
                    d[key] = value
                m["delivery"] = json.dumps(d)
            edits.append((f"{key}={json.dumps(value)}", edit))
    edits.append(("delivery_not_json", lambda t, m: m.__setitem__("delivery", "{")))
    edits.append(("delivery_missing", lambda t, m: m.pop("delivery")))
    for name, edit in edits:
        t, m = read_tensors(path)
        edit(t, m)
        write_tensors(path, t, m)
        p.check("in_flight", name, unverified, "refuse", watched=run + "/checkpoints", prefix=MPIRUN + ("3",))
        open(path, "wb").write(original)
    for name, value in [("metric_nan", "nan"), ("metric_inf", "-inf")]:  # non-finite metrics are valid
        t, m = read_tensors(path)
        d = dict(delivery)
        d["metrics"] = dict(d["metrics"], **{"critic/acc/mean": value})
        m["delivery"] = json.dumps(d)
        write_tensors(path, t, m)
        p.check("in_flight", name, unverified, "run", prefix=MPIRUN + ("3",))
        open(path, "wb").write(original)
    open(checkpoint + "/manifest.json", "w").write(manifest)


# ---- reward programs whose metrics are NaN or infinite, between the roles ----
def metrics(p, rng):
    out = os.path.join(p.work, "metrics")
    os.makedirs(out, exist_ok=True)
    answers = ['{"score": 0.5}', '{"score": 1, "big": 1e308}', '{"score": 0, "small": -1e308}',
               '{"score": 0.25, "flag": true}', '{"score": 0.5, "correct": false, "big": 1.7e308}']
    layouts = [("3", ["parallel.rollout_ranks=1"]), ("3", ["parallel.rollout_ranks=1", "async.max_staleness=1"]),
               ("4", ["parallel.rollout_ranks=2", "parallel.zero_stage=2"]), ("2", [])]
    for i, answer in enumerate(answers):
        program = os.path.join(out, f"reward_{i}.py")
        with open(program, "w") as f:
            f.write("import sys\nfor line in sys.stdin:\n    print(%r, flush=True)\n" % answer)
        for ranks, layout in layouts:
            p.check("metrics", f"{answer} {ranks} {' '.join(layout)}", ["train"] + TINY + layout + [
                "trainer.total_training_steps=2", "trainer.test_freq=1", "trainer.val_before_train=true",
                f"trainer.output_dir={out}/run_{i}_{ranks}_{len(layout)}", f"reward.command=python3 {program}"],
                "run", prefix=MPIRUN + (ranks,))


# ---- responses that are not whole UTF-8: a byte-level tokenizer whose model samples any byte ----
def utf8(p, rng):
    folder = os.path.join(p.work, "bytes")
    os.makedirs(folder, exist_ok=True)
    byte_tokenizer(folder, with_config=True)
    row = p.counts.setdefault("utf8", {"inputs": 0, "refuse": 0, "run": 0, "findings": 0})
    for seed in range(8):
        for mode in (["generate", "--jsonl"], ["generate"], ["eval", "--samples", "4"]):
            args = mode + TINY + [f"model.tokenizer={folder}", f"model.seed={seed}", f"data.max_response_length="
                                  f"{rng.choice([3, 5, 8, 13])}"] + (["--count", "3"] if mode[0] == "generate" else [])
            full = subprocess.run([p.binary] + args, capture_output=True)
            text = full.stdout + full.stderr
            ok = full.returncode == 0
            try:
                decoded = text.decode("utf-8")
                if mode == ["generate", "--jsonl"]:
                    lines = [json.loads(line) for line in full.stdout.decode().splitlines() if line.startswith("{")]
                    ok = ok and len(lines) >= 3
                ok = ok and not any(c in decoded for c in "\x00\x1b")
            except (UnicodeDecodeError, ValueError):
                ok = False
            row["inputs"] += 1
            row["run"] += 1
            if not ok:
                row["findings"] += 1
                p.findings.append(f"utf8/{' '.join(mode)} seed {seed}: exit {full.returncode}, not whole UTF-8 or "
                                  f"JSON:\n    {text[-300:]!r}")


def byte_tokenizer(folder, with_config):
    table, n = {}, 0
    for b in range(256):
        printable = 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255
        table[b] = chr(b) if printable else chr(256 + n)
        n += 0 if printable else 1
    tokenizer = {"version": "1.0", "added_tokens": [{"id": 256, "content": "<|im_end|>", "special": True}],
                 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
                 "decoder": {"type": "ByteLevel"},
                 "model": {"type": "BPE", "vocab": {table[b]: b for b in range(256)}, "merges": []}}
    json.dump(tokenizer, open(os.path.join(folder, "tokenizer.json"), "w"))
    if with_config:
        json.dump({"eos_token": "<|im_end|>"}, open(os.path.join(folder, "tokenizer_config.json"), "w"))


# ---- a key given twice in one config file: nested and dotted, in either order ----
def twice(p, rng):
    out = os.path.join(p.work, "twice")
    os.makedirs(out, exist_ok=True)
    # Every key with its default as `ppo config` prints it (valid YAML for the key), sections by indentation.
    defaults, sections = {}, []
    for line in subprocess.run([p.binary, "config"], capture_output=True, text=True).stdout.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        name, _, value = line.strip().partition(":")
        sections = sections[:depth]
        if value.strip():
            defaults[".".join(sections + [name])] = value.strip()
        else:
            sections.append(name)
    for key in rng.sample(sorted(defaults), min(100, len(defaults))):
        parts, value = key.split("."), defaults[key]
        nested = "".join("  " * i + part + ":\n" for i, part in enumerate(parts[:-1])) + \
            "  " * (len(parts) - 1) + parts[-1] + ": " + value + "\n"
        dotted = key + ": " + value + "\n"
        for order, text in [("nested_dotted", nested + dotted), ("dotted_nested", dotted + nested)]:
            path = os.path.join(out, "twice.yaml")
            with open(path, "w") as f:
                f.write(text)
            p.check("twice", f"{key}/{order}", ["config", "--config", path], "refuse")


# ---- safetensors shapes whose sizes multiply past int64 with a 0 among them, at stages 0 and 3 ----
def shapes(p, rng):
    run, folder = os.path.join(p.work, "shapes_run"), os.path.join(p.work, "shapes_hf")
    p.train(run, [], steps=1)
    status, output = p.run(["export", "--checkpoint", run + "/checkpoints/global_step_1", "--out", folder])
    if status != 0:
        sys.exit("probe_runs: the export failed:\n" + output)
    path = folder + "/model.safetensors"
    header, data = read_header(path)
    big = 2 ** 62
    for shape in [[0, big, 4], [big, 0, big], [big, big, 0], [0, 2 ** 63 - 1, 2], [3, 0, 2 ** 63 - 1],
                  [2 ** 32, 2 ** 32, 0], [0] + [2 ** 16] * 5]:
        edited = dict(header)
        edited["extra.weight"] = {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}
        write_header(path, edited, data)
        for stage in ("0", "3"):
            p.check("shapes", f"{shape} stage {stage}", ["train"] + TINY + QUIET + [
                f"model.path={folder}", f"parallel.zero_stage={stage}", "trainer.total_training_steps=1",
                f"trainer.output_dir={p.work}/shapes_out"], "refuse")
    write_header(path, header, data)
    p.check("shapes", "restored", ["train"] + TINY + QUIET + [
        f"model.path={folder}", "trainer.total_training_steps=1", f"trainer.output_dir={p.work}/shapes_out"], "run")


# ---- tokenizers without their EOS, and keys a subcommand does not use ----
def tokens(p, rng):
    folder = os.path.join(p.work, "no_config")
    os.makedirs(folder, exist_ok=True)
    byte_tokenizer(folder, with_config=False)
    for args in (["generate", "--count", "1"], ["eval", "--samples", "1"],
                 ["train", "trainer.total_training_steps=1", f"trainer.output_dir={p.work}/tokens_run"]):
        p.check("tokens", args[0], args + TINY + QUIET + [f"model.tokenizer={folder}"], "refuse")
    for args in (["generate", "--count", "1"], ["eval", "--samples", "1"]):
        for keys in (["parallel.rollout_ranks=1"], ["async.max_staleness=1"]):
            status, output = p.run(args + TINY + keys)
            row = p.counts.setdefault("roles_keys", {"inputs": 0, "refuse": 0, "run": 0, "findings": 0})
            row["inputs"] += 1
            row["run"] += 1
            if status != 0 or "are for `ppo train`" not in output:
                row["findings"] += 1
                p.findings.append(f"roles_keys/{args[0]} {keys}: exit {status}, no note:\n    {output[-300:]}")


# ---- a rank stopped before MPI_Init ----
def start_up(p, rng):
    row = p.counts.setdefault("start_up", {"inputs": 0, "refuse": 0, "run": 0, "findings": 0})
    for timeout in (3, 6):
        marker = f"trainer.output_dir={p.work}/start_{timeout}"
        command = " ".join([p.binary, "train"] + TINY + [marker, f"parallel.timeout_s={timeout}"])
        start = time.time()
        job = subprocess.run(list(MPIRUN) + ["2", "sh", "-c", 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then kill -STOP '
                                             '$$; fi; exec ' + command], capture_output=True, text=True, timeout=120)
        seconds = time.time() - start
        left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
        for pid in left:
            os.kill(int(pid), signal.SIGKILL)
        errors = [line for line in (job.stdout + job.stderr).splitlines() if line.startswith("error: ")]
        row["inputs"] += 1
        row["refuse"] += 1
        if job.returncode == 0 or not errors or "start-up" not in errors[0] or seconds > timeout + 15 or left:
            row["findings"] += 1
            p.findings.append(f"start_up/{timeout}: exit {job.returncode} after {seconds:.0f} s, {len(left)} left:"
                              f"\n    {(job.stdout + job.stderr)[-300:]}")


FAMILIES = ["in_flight", "metrics", "utf8", "twice", "shapes", "tokens", "start_up"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=os.path.join(SOURCE, "build/ppo"))
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return probe_families(args.binary, "probe_runs_", args.families.split(","), args.seed,
                          lambda p, name, rng: globals()[name](p, rng))


if __name__ == "__main__":
    sys.exit(main())
