#!/usr/bin/env python3
"""A run's metrics to an experiment tracker (Weights & Biases or MLflow), through the tracker's own client library.

The trainer's rank 0 starts this as a companion process per tracker in trainer.logger (records/tracker.h); it follows
the run folder's metrics.jsonl and never holds the trainer up. `ppo track --to wandb|mlflow RUN_DIR` runs it once over
a finished (or offline) run. Both ways it logs:
  - every numeric metric of every line of metrics.jsonl at its step (training/global_step);
  - the resolved config (config.yaml) as the run's config (W&B) or params (MLflow), flattened to dotted keys;
  - the validation table: one row per validation line, source, metric and difficulty (val/<source>/<metric>/<d>);
  - curves.svg as an artifact, when the run folder has one.
The tracked run's id and the last step logged are kept in RUN_DIR/tracking/<tracker>.json (and, once the run is
closed, how it ended in <tracker>.closed, which the trainer removes as it starts), so that a resumed run (or a second
`ppo track`) continues the same tracked run without logging a step twice: ppo.cpp resumes exactly, so a step
recomputed after a resume has the values already logged.

The end: when the trainer exits it writes RUN_DIR/tracking/trainer_exit (its exit status); a trainer that vanishes
without it (kill -9) is noticed by the parent process changing. Either way the rest of metrics.jsonl is logged and the
run closed (finished, failed or killed).

Offline: W&B with WANDB_MODE=offline (files under WANDB_DIR, `wandb sync` uploads them later); MLflow with a file store
or sqlite URI in MLFLOW_TRACKING_URI. The tracking environment (.venv-track, scripts/requirements-track.txt) is made
by scripts/install-deps.sh.
"""

import argparse
import json
import os
import re
import sys
import time

STEP_KEY = "training/global_step"
POLL_S = 1.0


def read_state(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def write_state(path, state):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, path)


def flat_config(run_dir):
    """config.yaml as {dotted key: text}; a minimal reader of the YAML ppo writes (nested mappings of scalars)."""
    path = os.path.join(run_dir, "config.yaml")
    if not os.path.exists(path):
        return None
    out, stack = {}, []
    with open(path) as f:
        for line in f:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            indent = (len(line) - len(line.lstrip(" "))) // 2
            key, _, value = line.strip().partition(":")
            del stack[indent:]
            if value.strip() == "":
                stack.append(key)
            else:
                out[".".join(stack + [key])] = value.strip()
    return out


def numeric(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def validation_rows(step, record):
    """val/<source>/<metric>/<difficulty> keys of one line as table rows."""
    rows = []
    for key, value in sorted(record.items()):
        parts = key.split("/")
        if len(parts) == 4 and parts[0] == "val" and numeric(value):
            rows.append([step, parts[1], parts[2], parts[3], float(value)])
    return rows


VALIDATION_COLUMNS = ["step", "source", "metric", "difficulty", "value"]


class MetricsFollower:
    """The complete lines of metrics.jsonl not read yet; a file that shrank (a resume set lines aside) is read again
    from its start, and the step filter keeps what was logged from being logged twice."""

    def __init__(self, path):
        self.path, self.offset, self.pending = path, 0, b""

    def lines(self):
        try:
            size = os.path.getsize(self.path)
        except OSError:
            return []
        if size < self.offset:
            self.offset, self.pending = 0, b""
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        data = self.pending + data
        *complete, self.pending = data.split(b"\n")
        records = []
        for line in complete:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # a line cut by a crash: metrics.jsonl stays the record
        return records


class WandbTracker:
    name = "wandb"

    def __init__(self, project, run_name, run_id):
        import wandb

        self.wandb = wandb
        self.run = wandb.init(project=project, name=run_name, id=run_id, resume="allow")
        self.run_id = self.run.id

    def log_config(self, config):
        self.run.config.update(config, allow_val_change=True)

    def log_steps(self, steps):
        for step, metrics in steps:
            self.run.log(metrics, step=step)

    def finish(self, run_dir, rows, status):
        if rows:
            self.run.log({"val/table": self.wandb.Table(columns=VALIDATION_COLUMNS, data=rows)})
        svg = os.path.join(run_dir, "curves.svg")
        if os.path.exists(svg):
            self.run.save(svg, base_path=run_dir, policy="now")
        self.run.finish(exit_code=0 if status == "finished" else 1)


def mlflow_key(key):
    """MLflow's metric names take letters, digits and _ - . space / only (pass@k becomes pass_k)."""
    return re.sub(r"[^A-Za-z0-9_\-. /]", "_", key)


class MlflowTracker:
    name = "mlflow"

    def __init__(self, project, run_name, run_id):
        # MLFLOW_TRACKING_URI, else MLflow's classic ./mlruns. A file store needs MLFLOW_ALLOW_FILE_STORE since
        # MLflow 3 (it is in maintenance mode there); ppo.cpp allows it, as offline runs need no server.
        uri = os.environ.get("MLFLOW_TRACKING_URI") or "file:" + os.path.abspath("mlruns")
        if uri.startswith("file:") or "://" not in uri:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        if run_id:
            self.run_id = run_id
            self.client.update_run(run_id, status="RUNNING")
        else:
            experiment = self.client.get_experiment_by_name(project)
            experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(project)
            self.run_id = self.client.create_run(experiment_id, run_name=run_name).info.run_id

    def log_config(self, config):
        from mlflow.entities import Param

        params = [Param(k, v[:6000]) for k, v in sorted(config.items())]
        for i in range(0, len(params), 100):  # MLflow's batch limit on params
            self.client.log_batch(self.run_id, params=params[i : i + 100])

    def log_steps(self, steps):
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(mlflow_key(k), float(v), now, step) for step, metrics in steps for k, v in sorted(metrics.items())]
        for i in range(0, len(batch), 1000):  # MLflow's batch limit on metrics
            self.client.log_batch(self.run_id, metrics=batch[i : i + 1000])

    def finish(self, run_dir, rows, status):
        if rows:
            table = {"columns": VALIDATION_COLUMNS, "data": rows}
            self.client.log_dict(self.run_id, table, "validation_table.json")
        svg = os.path.join(run_dir, "curves.svg")
        if os.path.exists(svg):
            self.client.log_artifact(self.run_id, svg)
        self.client.set_terminated(self.run_id, {"finished": "FINISHED", "failed": "FAILED"}.get(status, "KILLED"))


TRACKERS = {"wandb": WandbTracker, "mlflow": MlflowTracker}


def trainer_status(run_dir, parent):
    """None while the trainer runs; else finished, failed or killed."""
    marker = os.path.join(run_dir, "tracking", "trainer_exit")
    if os.path.exists(marker):
        with open(marker) as f:
            return "finished" if f.read().strip() == "0" else "failed"
    if parent is not None and os.getppid() != parent:
        return "killed"
    return None


def track(args):
    # The lowest CPU priority (W&B's service process inherits it): on cores the trainer keeps busy, the companion
    # takes only the time it leaves.
    os.nice(19)
    run_dir = args.run_dir
    state_dir = os.path.join(run_dir, "tracking")
    os.makedirs(state_dir, exist_ok=True)
    state_path = os.path.join(state_dir, args.to + ".json")
    state = read_state(state_path)
    closed_path = os.path.join(state_dir, args.to + ".closed")
    if os.path.exists(closed_path):
        os.remove(closed_path)  # an earlier part's
    tracker = TRACKERS[args.to](args.project, args.name or os.path.basename(os.path.abspath(run_dir)), state.get("run_id"))
    state["run_id"] = tracker.run_id
    logged = state.get("step", -1)
    write_state(state_path, dict(state, step=logged))
    follower = MetricsFollower(os.path.join(run_dir, "metrics.jsonl"))
    config_logged, rows = False, []
    while True:
        status = None if args.once else trainer_status(run_dir, args.parent)
        if not config_logged:
            config = flat_config(run_dir)
            if config is not None:
                tracker.log_config(config)
                config_logged = True
        steps = []  # the new lines' steps, logged together
        for record in follower.lines():
            step = record.get(STEP_KEY)
            if not numeric(step):
                continue
            step = int(step)
            rows += validation_rows(step, record)
            if step <= logged:
                continue
            steps.append((step, {k: v for k, v in record.items() if numeric(v) and k != STEP_KEY}))
            logged = step
        if steps:
            tracker.log_steps(steps)
            write_state(state_path, dict(state, step=logged))
        if args.once or status is not None:
            break
        time.sleep(POLL_S)
    status = "finished" if args.once else status
    tracker.finish(run_dir, rows, status)
    with open(closed_path, "w") as f:
        f.write(status + "\n")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--to", choices=sorted(TRACKERS), required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--project", default="ppo.cpp")
    parser.add_argument("--name", default="")
    parser.add_argument("--once", action="store_true", help="log what the run folder holds now, then close the run")
    parser.add_argument("--parent", type=int, help="the trainer's pid: its exit ends the following")
    args = parser.parse_args()
    try:
        return track(args)
    except Exception as e:  # one line, which the trainer's warning and `ppo track` show; metrics.jsonl stays the record
        print(f"error: ppo_track --to {args.to}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
