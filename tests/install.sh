#!/usr/bin/env bash
# ctest `install`: `cmake --install BUILD --prefix P` gives a tree that runs where the reference environment is gone.
# .venv-ref (whose pyarrow wheel supplied the Arrow and Parquet libraries at link time) is hidden under an empty tmpfs
# in a mount namespace of this process alone; there the installed program must load every library, write a Parquet
# file and generate from it what it generates from the same prompts in JSONL. Exit 77 (skipped) where a mount namespace cannot be made.
#   bash tests/install.sh BUILD VENV
set -u
build=$1
venv=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >"$prefix/install.log" 2>&1 || { cat "$prefix/install.log"; exit 1; }
if ! unshare -m true 2>/dev/null; then
  echo "install: no mount namespace here (unshare -m needs root): skipped"
  exit 77
fi
# shellcheck disable=SC2016  # expanded by the inner shell
unshare -m bash -c '
  set -eu
  prefix=$1 venv=$2
  mount -t tmpfs tmpfs "$venv"
  [ -z "$(ls -A "$venv")" ] || { echo "install: $venv is still visible"; exit 1; }
  if ldd "$prefix/bin/ppo" | grep -E "not found|$venv"; then
    echo "install: the installed ppo still needs $venv"
    exit 1
  fi
  ppo=$prefix/bin/ppo
  "$ppo" data reverse --count 4 --out "$prefix/prompts.parquet"
  "$ppo" data reverse --count 4 --out "$prefix/prompts.jsonl"
  for format in parquet jsonl; do
    "$ppo" generate --config "$3/configs/regression_tiny.yaml" data.val_files="$prefix/prompts.$format" --count 4 \
      >"$prefix/$format.txt"
  done
  cmp "$prefix/parquet.txt" "$prefix/jsonl.txt" || { echo "install: the Parquet prompts read differently"; exit 1; }
' install "$prefix" "$venv" "$(cd "$(dirname "$0")/.." && pwd)" || exit 1
echo "install: $prefix/bin/ppo ran with $venv hidden"
