#!/usr/bin/env bash
# README command (1), the main job: build, print the devices, run examples/tour, then the quick
# benchmark set (every family briefly) and its report table; on the GPU when one is usable, else on
# the sim (whose figures are CPU figures and say so).
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
cmake --preset "$preset" -B "$dir" "${extra[@]+"${extra[@]}"}" -DTESSEL_BUILD_TESTS=OFF >/dev/null
cmake --build "$dir" --target tour tessel-info tessel-bench -j "$(nproc)" >/dev/null
"$dir/tools/tessel-info"
echo
"$dir/examples/tour"
echo
echo "quick benchmark set (Google Benchmark; progress below, report after):"
"$dir/bench/tessel-bench" --benchmark_min_time=0.05 --benchmark_out="$dir/quick.json" --benchmark_out_format=json
/usr/bin/python3 bench/report.py "$dir/quick.json" --markdown "$dir/report.md" --images "$dir/report-img"
echo
sed -n '/^### /,$p' "$dir/report.md" | grep -v '^!\['
echo
echo "report: $dir/report.md, charts in $dir/report-img/"
