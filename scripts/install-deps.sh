#!/usr/bin/env bash
# Installs everything ppo.cpp needs on a fresh Debian 12 machine. Idempotent: packages already present are skipped.
set -euo pipefail

packages=(
  build-essential cmake ninja-build git pkg-config
  libtorch-dev          # LibTorch 1.13 (CPU)
  libopenblas0-openmp   # without it Debian's LibTorch falls back to the reference BLAS (~25x slower matmuls)
  libopenmpi-dev openmpi-bin
  libyaml-cpp-dev libcxxopts-dev catch2 nlohmann-json3-dev
  clang-format python3
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: installed ${missing[*]}"
