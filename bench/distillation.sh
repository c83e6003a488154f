#!/usr/bin/env bash
# On-policy distillation's costs (BENCHMARKS.md, "Distillation"), two parts:
#   1. time: the teacher phase against the reference phase on the same shape and tokens, in one run:
#      SmolLM2-135M-Instruct (scripts/get_smollm2.sh) as the policy, its reference (actor.use_kl_loss) and its teacher
#      (distillation.teacher.model.path, the same folder), configs/kk_smollm2.yaml with GRPO; once with the
#      sampled-token loss (k3) and once with jsd_topk at distillation.topk=128, whose teacher also picks its 128
#      most likely tokens of every response position. Per step after the first: timing_s/ref, timing_s/teacher.
#   2. memory at a 151,936-token vocabulary (Qwen2.5's and Qwen3's): the tiny model of configs/regression_tiny.yaml
#      with model.vocab_size=151936, its teacher a checkpoint of the same shape; the update's peak
#      (memory/update_actor_peak_mib, and what the update added on top of its state) with the k3 loss against the
#      top-k losses at k=128.
# Usage: bash bench/distillation.sh [steps]    (from the repository root after building; default 4 steps)
set -euo pipefail
steps=${1:-4}
ppo=${PPO:-build/ppo}
bash scripts/get_smollm2.sh >/dev/null
out=$(mktemp -d)
trap '[ -n "${PPO_BENCH_KEEP:-}" ] || rm -rf "$out"' EXIT
run() {  # run NAME key=value...
  local name=$1
  shift
  "$ppo" train trainer.output_dir="$out/$name" trainer.resume_mode=disable "$@" >"$out/$name.log" 2>&1 ||
    { cat "$out/$name.log"; exit 1; }
}
teacher=".ref/smollm2-135m-instruct"
for mode in k3 jsd_topk; do
  run "time_$mode" --config configs/kk_smollm2.yaml trainer.total_training_steps="$steps" trainer.save_freq=0 \
    trainer.write_checkpoints=false algorithm.adv_estimator=grpo distillation.enable=true \
    distillation.teacher.model.path="$teacher" distillation.loss_mode="$mode" distillation.topk=128 \
    distillation.use_policy_loss=true distillation.teacher.log_prob_micro_batch_size_per_gpu=4
done
python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
print("| loss mode | step | tokens | ref s | teacher s | teacher / ref |")
print("|---|---|---|---|---|---|")
for mode in ("k3", "jsd_topk"):
    rows = [json.loads(l) for l in open(f"{out}/time_{mode}/metrics.jsonl") if l.strip()][1:]  # step 1 warms up
    ratios = []
    for r in rows:
        ref, teacher = r["timing_s/ref"], r["timing_s/teacher"]
        ratios.append(teacher / ref)
        print(f"| {mode} | {int(r['training/global_step'])} | {r['perf/total_num_tokens']:.0f} | {ref:.3f} | "
              f"{teacher:.3f} | {teacher / ref:.3f} |")
    print(f"| {mode} | median | | | | {statistics.median(ratios):.3f} |")
PY
# Part 2: a teacher of the student's shape at V = 151,936 (one step of the same run, its checkpoint).
wide=(--config configs/regression_tiny.yaml model.vocab_size=151936 trainer.num_threads=2)
run wide_teacher "${wide[@]}" trainer.total_training_steps=1 trainer.save_freq=1 trainer.test_freq=0 \
  trainer.val_before_train=false
for mode in k3 forward_kl_topk jsd_topk; do
  run "wide_$mode" "${wide[@]}" trainer.total_training_steps=2 trainer.test_freq=0 trainer.val_before_train=false \
    trainer.write_checkpoints=false distillation.enable=true \
    distillation.teacher.model.path="$out/wide_teacher/checkpoints/global_step_1" distillation.loss_mode="$mode" \
    distillation.topk=128
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print()
print("| loss mode (V = 151,936, k = 128) | update_actor peak MiB | update added MiB | teacher phase peak MiB | "
      "peak / k3's |")
print("|---|---|---|---|---|")
base = None
for mode in ("k3", "forward_kl_topk", "jsd_topk"):
    m = [json.loads(l) for l in open(f"{out}/wide_{mode}/metrics.jsonl") if l.strip()][-1]
    peak = m["memory/update_actor_peak_mib"]
    base = base or peak
    print(f"| {mode} | {peak:.1f} | {m['memory/update_actor_added_mib']:.1f} | "
          f"{m['memory/teacher_peak_mib']:.1f} | {peak / base:.3f} |")
PY
