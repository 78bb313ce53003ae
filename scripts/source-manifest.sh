#!/usr/bin/env bash
# Prints "sha256  path" for every file a CUDA build of tessel reads (sources, CMake files), in one
# order on any machine. scripts/device-prebuild.sh stores it beside the binaries it packs, and
# scripts/device-check.sh uses those binaries only where its own tree prints the same list.
# Documentation, Python scripts and dated results are not build inputs and stay out.
set -euo pipefail
cd "$(dirname "$0")/.."
find CMakeLists.txt CMakePresets.json cmake include kernels tests bench tools examples -type f \
  -not -path 'bench/results/*' -not -name '*.md' -not -name '*.py' -not -name '*.pyc' -print0 |
  LC_ALL=C sort -z | xargs -0 sha256sum
