#!/usr/bin/env bash
# README command (1): build and run examples/tour, on the GPU when one is usable, else on the sim.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
scripts/install-deps.sh
preset=sim
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  preset=cuda
  extra=(-DCMAKE_CUDA_ARCHITECTURES=native)
fi
echo "tour: building with the $preset preset"
dir="build/tour-$preset"  # its own build tree: the test presets' caches stay as they are
cmake --preset "$preset" -B "$dir" "${extra[@]+"${extra[@]}"}" -DTESSEL_BUILD_TESTS=OFF -DTESSEL_BUILD_BENCH=OFF >/dev/null
cmake --build "$dir" --target tour tessel-info -j "$(nproc)" >/dev/null
"$dir/tools/tessel-info"
echo
"$dir/examples/tour"
