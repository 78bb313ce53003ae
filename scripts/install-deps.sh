#!/usr/bin/env bash
# Installs the Debian packages tessel's builds need, only those missing. The CUDA toolkit itself is
# expected at /usr/local/cuda (or nvcc on PATH); it is not a Debian package here.
set -euo pipefail
packages=(cmake ninja-build g++ catch2 libboost-context-dev libbenchmark-dev libdlpack-dev python3-matplotlib)
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
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "install-deps: no CUDA toolkit found (nvcc); install it from NVIDIA first" >&2
  exit 1
fi
