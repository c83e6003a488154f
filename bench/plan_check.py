#!/usr/bin/env python3
"""`ppo plan` against measurement (docs/memory.md, "Planning memory"): each phase's predicted peak next to the
memory/<phase>_peak_mib a real run logs, at parallel.zero_stage 0-3 on 1, 2 and 4 MPI ranks.

    python3 bench/plan_check.py CONFIG.yaml [key=value ...]

Two steps per cell, compared at the second (AdamW's moments appear at the first update); the planner is given the
run's longest prompt (--prompt-length). Prints predicted/measured MiB and the error per phase, and the largest error.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PPO = os.environ.get("PPO", os.path.join(ROOT, "build/ppo"))
UNITS = {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}


def measure(config, ranks, stage, extra):
    with tempfile.TemporaryDirectory() as out:
        launcher = [] if ranks == 1 else ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                                          "-np", str(ranks)]
        cmd = launcher + [PPO, "train", "--config", config, f"trainer.output_dir={out}",
                          "trainer.total_training_steps=2", "trainer.test_freq=0", "trainer.val_before_train=false",
                          "trainer.num_threads=1", "trainer.write_checkpoints=false", f"parallel.zero_stage={stage}"]
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        r = subprocess.run(cmd + extra, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd + extra)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
        return [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))][-1]


def plan(config, ranks, stage, extra, prompt_length):
    cmd = [PPO, "plan", "--config", config, "--world-size", str(ranks), "--prompt-length", str(prompt_length),
           f"parallel.zero_stage={stage}"] + extra
    phases = {}
    for line in subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines():
        m = re.match(r"^(\w+)\s+[\d.]+ \w+\s+[\d.]+ \w+\s+([\d.]+) (KiB|MiB|GiB)", line)
        if m:
            phases[m.group(1)] = float(m.group(2)) * UNITS[m.group(3)]
    return phases


def main():
    config, extra = sys.argv[1], sys.argv[2:]
    worst = 0.0
    for ranks in (1, 2, 4):
        for stage in range(4):
            measured = measure(config, ranks, stage, extra)
            cells = []
            for phase, predicted in plan(config, ranks, stage, extra, int(measured["prompt_length/max"])).items():
                mib = measured[f"memory/{phase}_peak_mib"]
                error = (predicted - mib) / mib
                worst = max(worst, abs(error))
                cells.append(f"{phase} {predicted:.1f}/{mib:.1f} ({error * 100:+.0f}%)")
            print(f"{ranks} rank(s), stage {stage}: " + "; ".join(cells), flush=True)
    print(f"largest error: {worst * 100:.1f}%")


if __name__ == "__main__":
    main()
