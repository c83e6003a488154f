#!/usr/bin/env python3
"""A hostile-input probe of ppo.cpp's LoRA and PEFT files, sharded optimizer state, unbounded sizes and numbers, and
the smaller surfaces beside them, through the real binary (docs/reliability.md gives its counts).

    python3 scripts/probe_hostile.py [--binary build/ppo] [--python .venv-ref/bin/python] [--families a,b,...]

Each input is a file, field or flag of the user's, made here from a few runs of the tiny config, and states what it
should do: `refuse` (exit 2 with exactly one `error:` line, no LibTorch backtrace, nothing already written changed)
or `run` (exit 0). Anything else is a finding: another exit status or a signal, several or no error lines, a refusal
of a valid input, or a run of an invalid one (a silent wrong run). Prints a line per finding and a table of counts
per family; exits 1 when there are findings. The Parquet family needs pyarrow (the reference environment's Python).
"""
import argparse
import copy
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--config", os.path.join(SOURCE, "configs/regression_tiny.yaml"), "trainer.num_threads=1",
        "model.attn_implementation=eager"]
LORA = ["actor.lora.rank=4", "actor.lora.alpha=8", "actor.lora.init_lora_weights=false"]
QUIET = ["trainer.test_freq=0", "trainer.val_before_train=false"]


# What a refusal of each family names: the file, field, flag or command concerned.
NAMED = {"peft_config": "adapter_config.json", "peft_tensors": "adapter_model.safetensors",
         "lora_checkpoint": "actor_lora.safetensors", "sharded_index": "actor_optim", "sharded_part": "actor_optim",
         "parquet": ".parquet", "counts": "--", "rewards": "is outside [-1e6, 1e6]", "data_source": "data_source"}


class Probe:
    def __init__(self, binary, work):
        self.binary, self.work = binary, work
        self.counts, self.findings = {}, []

    def run(self, args, env=None, timeout=300, prefix=()):
        full_env = dict(os.environ, **(env or {}))
        try:
            p = subprocess.run(list(prefix) + [self.binary] + args, capture_output=True, text=True, errors="replace",
                               timeout=timeout, env=full_env)
            return p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired:
            return "timeout", ""

    def check(self, family, name, args, expect, watched=None, env=None, prefix=()):
        """Runs `args` (after `prefix`); `expect` is refuse or run; `watched` is a folder whose files must not
        change. A refusal's error line must name what its family is about (NAMED)."""
        before = snapshot(watched) if watched else None
        status, output = self.run(args, env, prefix=prefix)
        errors = [line for line in output.splitlines() if line.startswith("error: ")]
        backtrace = "Exception raised from" in output or "frame #" in output
        if expect == "refuse":  # one error line naming what is wrong, with no control character in it
            ok = status == 2 and len(errors) == 1 and not backtrace and NAMED.get(family, "") in errors[0] and \
                not any(ord(c) < 32 and c != "\t" for c in errors[0])
        else:
            ok = status == 0 and not errors
        if watched and snapshot(watched) != before:
            ok = False
            output += "\n(files under " + watched + " changed)"
        row = self.counts.setdefault(family, {"inputs": 0, "refuse": 0, "run": 0, "findings": 0})
        row["inputs"] += 1
        row[expect] += 1
        if not ok:
            row["findings"] += 1
            tail = "\n    ".join(output.strip().splitlines()[-4:])
            self.findings.append(f"{family}/{name}: expected {expect}, got exit {status}:\n    {tail}")

    def train(self, out, extra, steps=2):
        status, output = self.run(["train"] + TINY + QUIET + [f"trainer.output_dir={out}",
                                                            f"trainer.total_training_steps={steps}"] + extra)
        if status != 0:
            sys.exit(f"probe_hostile: the setup run {out} failed:\n{output}")


def snapshot(folder):
    files = {}
    for root, _, names in os.walk(folder):
        for n in names:
            path = os.path.join(root, n)
            with open(path, "rb") as f:
                files[path] = f.read()
    return files


# ---- safetensors headers, rewritten in place (the tensors' bytes are kept) ----
def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return header, data


def write_header(path, header, data):
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


# ---- families ----
def peft_config(p, rng):
    run, adapter = os.path.join(p.work, "peft_run"), os.path.join(p.work, "adapter")
    p.train(run, LORA, steps=1)
    status, output = p.run(["export", "--checkpoint", run + "/checkpoints/global_step_1", "--lora", "adapter",
                            "--out", adapter])
    assert status == 0, output
    original = json.load(open(adapter + "/adapter_config.json"))
    weights = adapter + "/adapter_model.safetensors"
    eval_args = ["eval"] + TINY + LORA + [f"model.lora_path={adapter}", "data.val_size=8"]
    changed = {"use_dora": True, "fan_in_fan_out": True, "bias": "all", "lora_bias": True, "use_qalora": True,
               "modules_to_save": ["lm_head"], "rank_pattern": {"q_proj": 8}, "alpha_pattern": {"v_proj": 2},
               "layers_to_transform": [0], "layers_pattern": "layers", "exclude_modules": ["q_proj"],
               "trainable_token_indices": [1], "target_parameters": ["x.weight"], "layer_replication": [[0, 1]],
               "megatron_config": {"a": 1}, "alora_invocation_tokens": [3], "arrow_config": {"top_k": 2},
               "use_bdlora": {"a": 1}, "kasa_config": {"a": 1}, "velora_config": {"a": 1},
               "monteclora_config": {"a": 1}}
    for key, value in changed.items():
        p.check("peft_config", key, edit_json(adapter + "/adapter_config.json", original, {key: value}, eval_args),
                "refuse")
    defaults = {"use_dora": False, "fan_in_fan_out": False, "bias": "none", "modules_to_save": None,
                "rank_pattern": {}, "alpha_pattern": {}, "layers_to_transform": None, "exclude_modules": [],
                "peft_version": "0.21.2", "revision": "main", "inference_mode": False, "auto_mapping": None,
                "loftq_config": {}, "runtime_config": {"ephemeral_gpu_offload": False}, "megatron_core": "megatron.core",
                "qalora_group_size": 16, "init_lora_weights": "gaussian", "ensure_weight_tying": True}
    for key, value in defaults.items():
        p.check("peft_config", key + "_default", edit_json(adapter + "/adapter_config.json", original, {key: value},
                                                           eval_args), "run")
    wrong = {"r": [8, "4", 4.5, None, -4], "lora_alpha": [16, "8", None, 0, -8], "peft_type": ["LOHA", None, 1],
             "target_modules": [["q_proj"], "q_proj", ["q_proj", "lm_head"], [], ".*proj", 5],
             "use_rslora": [True, "yes", 1]}
    for key, values in wrong.items():
        for i, value in enumerate(values):
            p.check("peft_config", f"{key}_{i}", edit_json(adapter + "/adapter_config.json", original, {key: value},
                                                           eval_args), "refuse")
    for i in range(12):  # keys no PEFT has, with values of every JSON type
        key = "".join(rng.choice("abcdefghij_") for _ in range(8))
        value = rng.choice([1, -1.5, "x", [1], {"k": "v"}, True])
        p.check("peft_config", f"unknown_{i}", edit_json(adapter + "/adapter_config.json", original, {key: value},
                                                         eval_args), "refuse")
    json.dump(original, open(adapter + "/adapter_config.json", "w"))
    header, data = read_header(weights)
    names = [n for n in header if n != "__metadata__"]
    for i, name in enumerate(names[:4]):  # a tensor missing, renamed to another module, or of another shape
        edited = {k: v for k, v in header.items() if k != name}
        write_header(weights, edited, data)
        p.check("peft_tensors", f"missing_{i}", eval_args, "refuse")
        edited = dict(header)
        edited[name.replace("q_proj", "lm_head").replace("k_proj", "lm_head").replace("v_proj", "lm_head")
               .replace("o_proj", "lm_head").replace("up_proj", "lm_head").replace("down_proj", "lm_head")
               .replace("gate_proj", "lm_head") + "_extra"] = header[name]
        write_header(weights, edited, data)
        p.check("peft_tensors", f"extra_{i}", eval_args, "refuse")
        edited = dict(header)
        entry = dict(header[name])
        entry["shape"] = list(reversed(entry["shape"]))
        edited[name] = entry
        write_header(weights, edited, data)
        p.check("peft_tensors", f"transposed_{i}", eval_args, "refuse")
    write_header(weights, header, data)
    p.check("peft_tensors", "restored", eval_args, "run")


def edit_json(path, original, changes, args):
    edited = copy.deepcopy(original)
    edited.update(changes)
    json.dump(edited, open(path, "w"))
    return args


def lora_checkpoint(p, rng):
    run = os.path.join(p.work, "lora_run")
    p.train(run, LORA, steps=1)
    checkpoint = run + "/checkpoints/global_step_1"
    adapters = checkpoint + "/actor_lora.safetensors"
    base_eval = ["eval"] + TINY + ["data.val_size=8", "--checkpoint", checkpoint, "trainer.accept_checkpoints_without_manifest=true"]
    os.remove(checkpoint + "/manifest.json")  # edits below would otherwise be caught by the checksums alone
    header, data = read_header(adapters)
    header.setdefault("__metadata__", {})
    meta = header["__metadata__"]  # a binary that records nothing there is probed with the edits all the same
    settings, base = json.loads(meta.get("lora", "{}")), json.loads(meta.get("base", "{}"))
    good = LORA
    p.check("lora_checkpoint", "own_settings", base_eval + good, "run", watched=run)
    for i, extra in enumerate([["actor.lora.rank=4", "actor.lora.alpha=16"], ["actor.lora.rank=4", "actor.lora.alpha=8.5"],
                               ["actor.lora.rank=8", "actor.lora.alpha=8"],
                               ["actor.lora.rank=4", "actor.lora.alpha=8", "actor.lora.use_rslora=true"],
                               ["actor.lora.rank=4", "actor.lora.alpha=8", "actor.lora.target_modules=[q_proj,v_proj]"],
                               ["actor.lora.rank=4", "actor.lora.alpha=8", "actor.lora.target_modules=[all-linear,o_proj]"],
                               ["actor.lora.rank=0"],
                               good + ["model.seed=3"], good + ["model.init_std=0.05"]]):
        expect = "run" if "all-linear,o_proj" in extra[-1] else "refuse"
        p.check("lora_checkpoint", f"settings_{i}", base_eval + extra, expect, watched=run)
    edits = [("lora", lambda s, b: dict(s, alpha=1.0)), ("lora", lambda s, b: dict(s, rank=2)),
             ("lora", lambda s, b: dict(s, target_modules=["q_proj"])), ("lora", lambda s, b: dict(s, use_rslora=True)),
             ("base", lambda s, b: dict(b, files={"model.seed": "7", "model.init_std": "0.02"})),
             ("base", lambda s, b: dict(b, files={})), ("base", lambda s, b: dict(b, files={"x": 1})),
             ("base", lambda s, b: {"source": 5}), ("base", lambda s, b: "[not json"),
             ("lora", lambda s, b: "{\"rank\": 4"), ("lora", lambda s, b: [])]
    for i, (key, edit) in enumerate(edits):
        edited = copy.deepcopy(header)
        value = edit(settings, base)
        edited["__metadata__"][key] = value if isinstance(value, str) else json.dumps(value)
        write_header(adapters, edited, data)
        p.check("lora_checkpoint", f"header_{key}_{i}", base_eval + good, "refuse", watched=run)
    edited = copy.deepcopy(header)
    edited["__metadata__"]["base"] = 17  # not a string: the header itself is refused
    write_header(adapters, edited, data)
    p.check("lora_checkpoint", "header_not_string", base_eval + good, "refuse", watched=run)
    write_header(adapters, header, data)
    p.check("lora_checkpoint", "restored", base_eval + good, "run", watched=run)
    # Resume and export over another base, the seeded one of another seed (model.seed is a run key: allowed here).
    p.check("lora_checkpoint", "resume_other_seed",
            ["train"] + TINY + QUIET + LORA + [f"trainer.output_dir={run}", "trainer.total_training_steps=2",
                                               "model.seed=9", "trainer.resume_allow_config_change=true",
                                               "trainer.accept_checkpoints_without_manifest=true"],
            "refuse")
    p.check("lora_checkpoint", "export_other_seed",
            ["export", "--checkpoint", checkpoint, "--out", os.path.join(p.work, "merged"), "model.seed=9",
             "trainer.accept_checkpoints_without_manifest=true"], "refuse")


def sharded_index(p, rng):
    run = os.path.join(p.work, "zero_run")
    p.train(run, ["parallel.zero_stage=1"], steps=2)
    checkpoint = run + "/checkpoints/global_step_2"
    os.remove(checkpoint + "/manifest.json")
    index_path = checkpoint + "/actor_optim.index.json"
    original = json.load(open(index_path))
    resume = ["train"] + TINY + QUIET + [f"trainer.output_dir={run}", "trainer.total_training_steps=2",
                                          "parallel.zero_stage=1", "trainer.accept_checkpoints_without_manifest=true"]
    metrics = run + "/metrics.jsonl"
    paths = list(json_paths(original))
    bad_values = [None, -1, 0, 1, 2 ** 62, 2 ** 64 - 1, -2 ** 63, 1.5, "x", "", [], {}, True, [1, 2], {"a": 1}]
    done = 0
    while done < 70:
        path = rng.choice(paths)
        value = rng.choice(bad_values + ["drop"])
        edited = copy.deepcopy(original)
        parent, key = locate(edited, path)
        if value == "drop":
            if isinstance(parent, list):
                continue
            del parent[key]
        else:
            if parent[key] == value and type(parent[key]) is type(value):
                continue
            parent[key] = value
        json.dump(edited, open(index_path, "w"))
        before = open(metrics).read()
        p.check("sharded_index", "/".join(map(str, path)) + "=" + json.dumps(value), resume, "refuse")
        if open(metrics).read() != before:
            p.findings.append(f"sharded_index/{path}: metrics.jsonl changed")
        done += 1
    json.dump(original, open(index_path, "w"))
    p.check("sharded_index", "restored", resume, "run")
    part = checkpoint + "/actor_optim.0-of-1.safetensors"
    header, data = read_header(part)
    for key, value in [("rank", "1"), ("rank", "-1"), ("rank", "0x0"), ("world_size", "2"), ("world_size", "0"),
                       ("tag", "another"), ("tag", ""), ("rank", None), ("world_size", None), ("tag", None)]:
        edited = copy.deepcopy(header)
        if value is None:
            del edited["__metadata__"][key]
        else:
            edited["__metadata__"][key] = value
        write_header(part, edited, data)
        p.check("sharded_part", f"{key}={value}", resume, "refuse")
    write_header(part, header, data)
    p.check("sharded_part", "restored", resume, "run")


def json_paths(value, prefix=()):
    if isinstance(value, dict):
        for k, v in value.items():
            yield prefix + (k,)
            yield from json_paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            yield prefix + (i,)
            yield from json_paths(v, prefix + (i,))


def locate(document, path):
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    return parent, path[-1]


def parquet(p, rng, python):
    out = os.path.join(p.work, "parquet")
    os.makedirs(out, exist_ok=True)
    script = os.path.join(out, "make.py")
    cases = [("nulls_300M_1row", 1, 0, 300_000_000, "null", "refuse"),
             ("nulls_2M_1row", 1, 0, 2_000_000, "null", "refuse"),
             ("nulls_1000_row0_of_16", 16, 0, 1000, "null", "run"),
             ("int_nulls_30M", 1, 0, 30_000_000, "int64", "refuse"),
             ("string_nulls_30M", 1, 0, 30_000_000, "string", "refuse"),
             ("struct_nulls_30M", 1, 0, 30_000_000, "struct", "refuse"),
             ("list_list_nulls_30M", 1, 0, 30_000_000, "listlist", "refuse"),
             ("nulls_50M_row7_of_64", 64, 7, 50_000_000, "null", "refuse"),
             ("nulls_900k_row3_of_16", 16, 3, 900_000, "null", "run"),
             ("nulls_1500k_row3_of_8", 8, 3, 1_500_000, "null", "refuse"),
             ("nulls_20M_row0_of_4096", 4096, 0, 20_000_000, "null", "refuse"),
             ("int_40M_row63_of_64", 64, 63, 40_000_000, "int64", "refuse")]
    with open(script, "w") as f:
        f.write(PARQUET_MAKER)
    for name, rows, row, n, kind, expect in cases:
        path = os.path.join(out, name + ".parquet")
        made = subprocess.run([python, script, path, str(rows), str(row), str(n), kind], capture_output=True, text=True)
        assert made.returncode == 0, made.stderr
        args = ["train"] + TINY + QUIET + [f"data.train_files={path}", "trainer.total_training_steps=1",
                                           f"trainer.output_dir={os.path.join(out, 'run_' + name)}"]
        p.check("parquet", name, args, expect)


PARQUET_MAKER = r'''
import sys
import pyarrow as pa, pyarrow.parquet as pq
path, rows, row, n, kind = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
lengths = [1] * rows
lengths[row] = n
total = sum(lengths)
if kind == "null":
    values = pa.nulls(total)
elif kind == "int64":
    values = pa.nulls(total, pa.int64())
elif kind == "string":
    values = pa.nulls(total, pa.string())
elif kind == "struct":
    values = pa.nulls(total, pa.struct([("a", pa.int64())]))
else:
    values = pa.nulls(total, pa.list_(pa.int64()))
offsets = [0]
for k in lengths:
    offsets.append(offsets[-1] + k)
extra = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)
digits = [str(10 + i % 89) for i in range(rows)]
table = pa.table({"prompt": [d + ">" for d in digits], "answer": [d[::-1] for d in digits],
                  "ground_truth": [{"target": d[::-1]} for d in digits], "difficulty": [2] * rows, "extra": extra})
pq.write_table(table, path, row_group_size=rows)
'''


def counts(p, rng):
    out = os.path.join(p.work, "counts")
    os.makedirs(out, exist_ok=True)
    huge = ["0", "-1", "2147483648", "4611686018427387904", "9223372036854775807", "99999999999999999999", "1e9",
            "x"]
    for value in huge:
        p.check("counts", f"eval_samples_{value}", ["eval"] + TINY + ["--samples", value], "refuse")
        p.check("counts", f"generate_count_{value}", ["generate"] + TINY + ["--count", value], "refuse")
        p.check("counts", f"data_count_{value}", ["data", "kk", "--count", value, "--out", out + "/kk.jsonl"],
                "refuse")
        p.check("counts", f"plan_world_{value}", ["plan"] + TINY + ["--world-size", value, "parallel.pad_to_world=true"],
                "refuse")
    for value in ["-1", "4194305", "4611686018427387904", "x"]:
        p.check("counts", f"plan_prompt_{value}", ["plan"] + TINY + ["--prompt-length", value], "refuse")
    for flag, value in [("--depth", "9"), ("--depth", "0"), ("--width", "1"), ("--width", "9"),
                        ("--people", "1-1000000"), ("--people", "9")]:
        p.check("counts", f"kk{flag}={value}", ["data", "kk", flag, value, "--count", "2", "--out", out + "/kk.jsonl"],
                "refuse")
    for value in ["0", "-5", "1000000000000"]:
        p.check("counts", f"regress_jobs_{value}", ["regress", "--jobs", value, "--out", out + "/regress"], "refuse")
    for value in ["0", "-1"]:
        p.check("counts", f"max_shard_bytes_{value}", ["export", "--checkpoint", "nowhere", "--max-shard-bytes", value,
                                                       "--out", out + "/hf"], "refuse")
    p.check("counts", "eval_samples_2", ["eval"] + TINY + ["--samples", "2", "data.val_size=8"], "run")
    p.check("counts", "plan_world_1048576", ["plan"] + TINY + ["--world-size", "1048576", "data.train_batch_size=16",
                                                               "parallel.pad_to_world=true"], "run")
    p.check("counts", "data_kk_8_8", ["data", "kk", "--depth", "8", "--width", "8", "--count", "2", "--people", "2",
                                      "--out", out + "/kk.jsonl"], "run")


def rewards(p, rng):
    out = os.path.join(p.work, "rewards")
    os.makedirs(out, exist_ok=True)
    values = [("1e6", "run"), ("-1e6", "run"), ("1000000.5", "refuse"), ("3.0e38", "refuse"), ("-3.4e38", "refuse"),
              ("1e308", "refuse"), ("1e-300", "run"), ("12345.678", "run")]
    for i, (value, expect) in enumerate(values):
        program = os.path.join(out, f"reward_{i}.py")
        with open(program, "w") as f:
            f.write("import json, sys\nfor line in sys.stdin:\n"
                    f"    print(json.dumps({{'score': {value}}}), flush=True)\n")
        p.check("rewards", f"score_{value}", ["train"] + TINY + QUIET + [
            "trainer.total_training_steps=1", f"trainer.output_dir={out}/run_{i}", f"reward.command=python3 {program}"],
            expect)
        env = os.path.join(out, f"env_{i}.py")
        with open(env, "w") as f:
            f.write("import json, sys\nfor line in sys.stdin:\n"
                    f"    print(json.dumps({{'output': 'x', 'reward': {value}, 'done': True}}), flush=True)\n")
        p.check("rewards", f"tool_reward_{value}", ["train"] + TINY + QUIET + [
            "trainer.total_training_steps=1", f"trainer.output_dir={out}/tools_{i}", "data.max_response_length=48",
            "model.max_position_embeddings=64", "rollout.multi_turn.enable=true", "rollout.multi_turn.call_start=",
            "rollout.multi_turn.stop=", f"rollout.multi_turn.environment.command=python3 {env}"], expect)


def data_source(p, rng):
    out = os.path.join(p.work, "data_source")
    os.makedirs(out, exist_ok=True)
    characters = [chr(c) for c in list(range(0, 32)) + [127]]
    for c in characters[::2] + ["\x1b[31m", "\r\n"]:
        path = write_source(out, "rev" + c + "erse")
        p.check("data_source", f"U+{ord(c[0]):04X}", ["generate"] + TINY + [f"data.val_files={path}", "--count", "1",
                                                                             "data.chat_template=plain", "data.max_prompt_length=24",
                                                                             "model.max_position_embeddings=64",
                                                                             "reward.function=exact_match"],
                "refuse")
    for text in ["réverse", "反转", "re verse", "rev/erse"]:
        path = write_source(out, text)
        p.check("data_source", text, ["generate"] + TINY + [f"data.val_files={path}", "--count", "1",
                                                            "data.chat_template=plain", "reward.function=exact_match",
                                                            "data.max_prompt_length=24",
                                                            "model.max_position_embeddings=64"], "run")


def write_source(folder, source):
    path = os.path.join(folder, "val.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps({"data_source": source, "prompt": [{"role": "user", "content": "12>"}],
                            "reward_model": {"ground_truth": "21"}}) + "\n")
    return path


def rest(p, rng):
    interpreter = subprocess.run(["readelf", "-l", p.binary], capture_output=True, text=True).stdout
    loader = [l.split(":", 1)[1].strip(" ]\n") for l in interpreter.splitlines() if "interpreter" in l]
    # Started through the dynamic loader, without a spin setting: the spin-wait re-execution must run ppo itself.
    os.environ.pop("GOMP_SPINCOUNT", None)
    os.environ.pop("OMP_WAIT_POLICY", None)
    for args in (["config"], ["config", "--comments"], ["plan"] + TINY,
                 ["data", "reverse", "--count", "3", "--out", os.path.join(p.work, "r.jsonl")]):
        p.check("loader", args[0], args, "run", prefix=loader[:1])
    run = os.path.join(p.work, "reused")
    p.train(run, ["data.seed=4"], steps=1)
    p.train(run, ["trainer.resume_mode=disable"], steps=1)
    p.check("reused_folder", "export_previous", ["export", "--checkpoint", run + "/previous-1/checkpoints/global_step_1",
                                                 "--out", os.path.join(p.work, "prev_hf")], "run")


def report(p):
    """Prints each finding and the table of counts per family; 1 when there are findings, else 0."""
    for finding in p.findings:
        print("finding:", finding)
    print(f"{'family':<16} {'inputs':>7} {'refuse':>7} {'run':>5} {'findings':>9}")
    total = {"inputs": 0, "refuse": 0, "run": 0, "findings": 0}
    for family, row in p.counts.items():
        print(f"{family:<16} {row['inputs']:>7} {row['refuse']:>7} {row['run']:>5} {row['findings']:>9}")
        for k in total:
            total[k] += row[k]
    print(f"{'all':<16} {total['inputs']:>7} {total['refuse']:>7} {total['run']:>5} {total['findings']:>9}")
    return 1 if p.findings else 0


FAMILIES = ["peft_config", "lora_checkpoint", "sharded_index", "parquet", "counts", "rewards", "data_source", "rest"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=os.path.join(SOURCE, "build/ppo"))
    parser.add_argument("--python", default=os.path.join(SOURCE, ".venv-ref/bin/python"))
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    def family(p, name, rng):
        if name == "parquet":
            parquet(p, rng, args.python)
        else:
            globals()[name](p, rng)
    return probe_families(args.binary, "probe_hostile_", args.families.split(","), args.seed, family)


def probe_families(binary, prefix, families, seed, run_family):
    """Runs `run_family(probe, name, rng)` for each of `families` in a scratch folder, then report()."""
    rng = random.Random(seed)
    work = tempfile.mkdtemp(prefix=prefix)
    try:
        p = Probe(os.path.abspath(binary), work)
        for name in families:
            run_family(p, name, rng)
        return report(p)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
