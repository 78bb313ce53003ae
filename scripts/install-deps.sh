#!/usr/bin/env bash
# Installs the Debian packages tessel's builds need, only those missing. The CUDA toolkit itself is
# expected at /usr/local/cuda (or nvcc on PATH); it is not a Debian package here.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(cmake ninja-build g++ catch2 libboost-context-dev libbenchmark-dev libdlpack-dev libopenblas-dev python3-matplotlib)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# cuobjdump and the nvdisasm it runs (SASS for the kernel report, docs/kernels.md) are not in this
# toolkit nor in Debian; NVIDIA publishes them on PyPI. They go into the project's own .deps/.
tools=.deps/cuda-tools
if [ ! -x "$tools/nvidia/cu13/bin/nvdisasm" ] && ! command -v cuobjdump >/dev/null 2>&1; then
  echo "install-deps: installing cuobjdump and nvdisasm from PyPI into $tools"
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --target "$tools" "nvidia-cuda-cuobjdump==13.5.37" "nvidia-cuda-nvdisasm==13.5.37" ||
    echo "install-deps: cuobjdump could not be installed; the kernel report will lack its SASS columns" >&2
fi
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "install-deps: no CUDA toolkit found (nvcc); install it from NVIDIA first" >&2
  exit 1
fi
