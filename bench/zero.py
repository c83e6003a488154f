#!/usr/bin/env python3
"""ZeRO's cost (BENCHMARKS.md, "ZeRO sharding"): step time, bytes sent and model state per rank at
parallel.zero_stage 0-3 on 2 and 4 MPI ranks, and the update's bytes against ZeRO's expected volumes.

    python3 bench/zero.py [--ranks 2 4] [--steps 4] [extra key=value ...]

Runs `ppo train --config configs/bench_memory.yaml` (a 5.8M-parameter policy, critic and reference; one micro-batch
per mini-batch, one mini-batch per step) for --steps steps per cell, one rank per core at most oversubscribed as
mpirun allows. Time per step: the median of the steps after the first. Bytes: comm/<phase>_sent_mib, what each
collective's payload implies for a ring algorithm (parallel/context.h Context::bytes_sent). ZeRO (Rajbhandari et al.
2020, section 7) expects 2 Psi elements per step for data parallelism (an all-reduce) and for stages 1-2
(reduce-scatter + all-gather), and 3 Psi for stage 3 (an all-gather in the forward and in the backward, a
reduce-scatter), Psi the parameters; with W ranks a ring sends (W - 1) / W of that, which is the figure printed.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(ppo, ranks, stage, steps, extra, out):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(ranks), ppo, "train",
           "--config", os.path.join(ROOT, "configs/bench_memory.yaml"), f"trainer.output_dir={out}",
           f"trainer.total_training_steps={steps}", "trainer.num_threads=1", "trainer.logger=[jsonl]",
           f"parallel.zero_stage={stage}"] + extra
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    psi = int(next(line for line in r.stdout.splitlines() if line.startswith("model: ")).split()[1])
    return [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))], psi


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("extra", nargs="*")
    args = parser.parse_args()
    ppo = os.environ.get("PPO", os.path.join(ROOT, "build/ppo"))
    print(f"{'ranks':>5} {'stage':>5} {'s/step':>7} {'vs 0':>6} {'sent MiB/step':>13} {'update_actor':>12} "
          f"{'expected':>8} {'model state MiB':>15}")
    for ranks in args.ranks:
        base = None
        for stage in range(4):
            with tempfile.TemporaryDirectory() as out:
                lines, psi = run(ppo, ranks, stage, args.steps, args.extra, out)
            times = [m["timing_s/step"] for m in lines[1:]]
            step_s = statistics.median(times)
            base = base or step_s
            sent = statistics.median(sum(v for k, v in m.items() if k.startswith("comm/")) for m in lines[1:])
            update = statistics.median(m["comm/update_actor_sent_mib"] for m in lines[1:])
            state = lines[-1]["memory/model_state_mib"]
            psi_bytes = 4 * psi  # float32 parameters of the policy
            factor = (3 if stage == 3 else 2) * (ranks - 1) / ranks
            print(f"{ranks:>5} {stage:>5} {step_s:>7.2f} {step_s / base:>5.2f}x {sent:>13.1f} {update:>12.1f} "
                  f"{factor * psi_bytes / 2**20:>8.1f} {state:>15.1f}", flush=True)


if __name__ == "__main__":
    main()
