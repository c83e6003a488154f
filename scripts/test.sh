#!/usr/bin/env bash
# README's test command (after scripts/install-deps.sh): builds ppo.cpp against both supported LibTorch versions and
# runs the whole ctest suite on each (labels cpu, mpi, calibration, gpu; the gpu test is skipped without a CUDA device).
#   build/         Debian's LibTorch 1.13 (libtorch-dev)
#   build-torch2/  PyTorch 2.11's LibTorch, from the wheel in .venv-ref (a CUDA 13 build: its CUDA/NCCL code compiles
#                  and links here; it runs on the CPU)
# Arguments are passed to both ctest runs, e.g. `bash scripts/test.sh -L cpu` or `-R bpe`. Tests labelled
# `calibration` (the memory planner against measured multi-rank runs) hold it to the build it was calibrated on,
# build/. Tests labelled `once` run in build/ only: the source checks and two suites at once (which tests the tests'
# temporary folders) do not depend on the LibTorch build, and the default experiment's end-to-end test is what README's
# first command builds against 1.13 (the 2.11 build's learning is held by `ppo regress --quick`).
set -euo pipefail
cd "$(dirname "$0")/.."
torch2_prefix=$(.venv-ref/bin/python -c 'import os, torch; print(os.path.dirname(torch.__file__))')

start=$SECONDS
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j2
built_113=$((SECONDS - start))
start=$SECONDS
# The fuzz targets do not depend on the LibTorch version (only fuzz_safetensors links it): they run in build/ alone.
cmake -S . -B build-torch2 -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch2_prefix" -DPPO_FUZZ=OFF
cmake --build build-torch2 -j2
built_2x=$((SECONDS - start))

# Debian's OpenBLAS (0.3.21, under LibTorch 1.13) picks its kernels by the CPU's model. On a virtual CPU it does not
# know (an "Intel Xeon Processor" with AVX-512) it falls back to Prescott's SSE3 kernels, on which the one-thread tests
# ran up to twice as long (docs/building.md). There, unless OPENBLAS_CORETYPE is set, the tests run with the kernels
# the CPU's flags allow.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [[ "$(OPENBLAS_VERBOSE=2 build/ppo --help 2>&1 || true)" == "Core: Prescott"* ]]; then
  case " $(grep -m1 '^flags' /proc/cpuinfo) " in
    *" avx512f "*) export OPENBLAS_CORETYPE=SkylakeX ;;
    *" avx2 "*) export OPENBLAS_CORETYPE=Haswell ;;
  esac
  echo "test.sh: OpenBLAS chose Prescott's kernels; the tests run with OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
fi

status=0
start=$SECONDS
ctest --test-dir build --output-on-failure -j2 "$@" || status=1
tested_113=$((SECONDS - start))
start=$SECONDS
ctest --test-dir build-torch2 --output-on-failure -j2 -LE "once|calibration" "$@" || status=1
tested_2x=$((SECONDS - start))
echo "test.sh: LibTorch 1.13 build ${built_113} s, ctest ${tested_113} s; LibTorch 2.11 build ${built_2x} s, ctest ${tested_2x} s"
exit $status
