#!/usr/bin/env bash
# Downloads (does not install) the Debian packages the CUDA build's tests and benchmarks need into
# .deps/, for a GPU machine without network: scripts/device-check.sh unpacks them there.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps
cd .deps
# OpenBLAS (and its Fortran runtime) for BM_matmul's CPU rows: the GPU image has none outside Python.
apt-get download catch2 libbenchmark-dev libbenchmark1debian libdlpack-dev \
  libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0 >/dev/null
ls -1 *.deb
