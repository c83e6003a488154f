#!/usr/bin/env bash
# A mixture-of-experts model against the dense model with the same active parameters (BENCHMARKS.md, "Mixture of
# experts"): bench_generate's KV-cache decoding (tokens/s) and its --train forward and backward (the update's work,
# tokens/s), float32 on the CPU, in one run:
#   dense  width 256, 4 layers, 8/4 heads, SwiGLU 512, the character vocabulary
#   moe    the same with 8 experts of SwiGLU 256 in every layer, top-2 (model.model_type=mixtral): 2 x 256 = 512 active
#          MLP rows per token, as the dense model's, and 4x its MLP parameters in all
# Usage: bash bench/moe.sh [repeats]    (from the repository root after building; default 3, best of them)
set -euo pipefail
repeats=${1:-3}
bench=${BENCH:-build/bench_generate}
shape="model.hidden_size=256 model.num_layers=4 model.num_heads=8 model.num_kv_heads=4 model.intermediate_size=512"
moe="model.model_type=mixtral model.moe.num_experts=8 model.moe.num_experts_per_tok=2 model.moe.intermediate_size=256"
field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())[sys.argv[1]])' "$1"; }
echo "| model | parameters | decode tokens/s | update tokens/s |"
echo "|---|---|---|---|"
for name in dense moe; do
  keys="$shape"
  [ "$name" = moe ] && keys="$shape $moe"
  # shellcheck disable=SC2086
  decode=$("$bench" --batch 32 --prompt-len 32 --new-tokens 64 --repeats "$repeats" --no-recompute --json $keys)
  # shellcheck disable=SC2086
  update=$("$bench" --train --batch 16 --prompt-len 32 --new-tokens 96 --repeats "$repeats" --json $keys)
  printf "| %s | %s | %.0f | %.0f |\n" "$name" "$(echo "$update" | field params)" \
    "$(echo "$decode" | field tokens_per_s)" "$(echo "$update" | field tokens_per_s)"
done
