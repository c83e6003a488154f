"""Reads a tracked run back through the tracker's own reader and compares it with the run folder's metrics.jsonl.

usage: track_check.py [--except-timings] mlflow RUN_DIR            (MLFLOW_TRACKING_URI names the store)
       track_check.py [--except-timings] wandb RUN_DIR WANDB_DIR   (the offline run files under WANDB_DIR/wandb)
--except-timings leaves out what differs between two runs of a step by nature (timing_s/, perf/, memory/, comm/):
a resumed run's recomputed steps.

Every numeric key of every line of metrics.jsonl must be in the tracked run at that line's step with the same value,
each step once; the run's config must hold config.yaml's keys. Prints one summary line; exits 1 with the differences.
"""

import glob
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import ppo_track  # noqa: E402  (the companion's own key mapping and config reader)


TIMINGS = ("timing_s/", "perf/", "memory/", "comm/")


def expected(run_dir, except_timings=False):
    """{key: {step: value}} from metrics.jsonl."""
    out = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            step = int(record[ppo_track.STEP_KEY])
            for key, value in record.items():
                if except_timings and key.startswith(TIMINGS):
                    continue
                if key != ppo_track.STEP_KEY and ppo_track.numeric(value):
                    out.setdefault(key, {})[step] = float(value)
    return out


def mlflow_run(run_dir):
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # the tests' stores are file stores, as the companion's
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    run_id = ppo_track.read_state(os.path.join(run_dir, "tracking", "mlflow.json"))["run_id"]
    history = {}
    for key in expected(run_dir):
        points = client.get_metric_history(run_id, ppo_track.mlflow_key(key))
        history[key] = [(p.step, p.value) for p in points]
    params = client.get_run(run_id).data.params
    artifacts = [a.path for a in client.list_artifacts(run_id)]
    return history, params, artifacts, client.get_run(run_id).info.status


def wandb_run(run_dir, wandb_dir):
    from wandb.proto import wandb_internal_pb2 as pb
    from wandb.sdk.internal import datastore

    run_id = ppo_track.read_state(os.path.join(run_dir, "tracking", "wandb.json"))["run_id"]
    history, config = {}, {}
    files = sorted(glob.glob(os.path.join(wandb_dir, "wandb", f"offline-run-*-{run_id}", f"run-{run_id}.wandb")))
    for path in files:  # a resumed run: one offline folder per part, the same run id
        store = datastore.DataStore()
        store.open_for_scan(path)
        while (data := store.scan_data()) is not None:
            record = pb.Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "history":
                items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
                for key, value in items.items():
                    if not key.startswith("_") and ppo_track.numeric(value):
                        history.setdefault(key, []).append((record.history.step.num, float(value)))
            elif kind == "config":
                for item in record.config.update:
                    config[item.key] = json.loads(item.value_json)
    return history, config, files


def compare(want, history):
    problems = []
    for key, steps in want.items():
        got = history.get(key, [])
        if len(got) != len({s for s, _ in got}):
            problems.append(f"{key}: a step logged twice: {got[:6]}")
        got_map = dict(got)
        for step, value in steps.items():
            if got_map.get(step) != value:
                problems.append(f"{key} at step {step}: metrics.jsonl {value}, tracked {got_map.get(step)}")
        if set(got_map) - set(steps):
            problems.append(f"{key}: tracked steps not in metrics.jsonl: {sorted(set(got_map) - set(steps))[:6]}")
    return problems


def main():
    args = sys.argv[1:]
    except_timings = args[0] == "--except-timings"
    if except_timings:
        args = args[1:]
    tracker, run_dir = args[0], args[1]
    want = expected(run_dir, except_timings)
    config_keys = set(ppo_track.flat_config(run_dir) or {})
    if tracker == "mlflow":
        history, params, artifacts, status = mlflow_run(run_dir)
        problems = compare(want, history)
        problems += [f"param {k} missing" for k in sorted(config_keys - set(params))][:5]
        if os.path.exists(os.path.join(run_dir, "curves.svg")) and "curves.svg" not in artifacts:
            problems.append(f"curves.svg not among the artifacts {artifacts}")
        extra = f"status {status}, {len(params)} params, artifacts {sorted(artifacts)}"
    else:
        history, config, files = wandb_run(run_dir, args[2])
        problems = compare(want, history)
        problems += [f"config {k} missing" for k in sorted(config_keys - set(config))][:5]
        extra = f"{len(files)} offline part(s), {len(config)} config keys"
    values = sum(len(v) for v in want.values())
    print(f"track_check {tracker}: {len(want)} keys, {values} values compared, {len(problems)} differ; {extra}")
    for p in problems[:20]:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
