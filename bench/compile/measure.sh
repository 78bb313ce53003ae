#!/usr/bin/env bash
# Compile-time figures for docs/compile-time.md: CPU seconds (user + system) of
#   1. an empty main including one header, on the sim (g++ -O2), for the umbrella and each piece;
#   2. the small program (small_tessel.cu: ones, a fused a * b + 1, a matmul launch, exp(x) * 2)
#      compiled by nvcc for sm_90, and the same program with MatX (small_matx.cu) when MATX_INCLUDE
#      names MatX's include/ directory (git clone https://github.com/NVIDIA/MatX).
#   3. tessel's runtime source, compiled once per program (core/linkage.hpp), for both backends.
# Every file is compiled as the CMake targets tessel::sim and tessel::cuda compile it, with
# TESSEL_SEPARATE_RUNTIME (the headers declare the runtime; one source per program defines it).
# Each figure is the best of REPEAT runs (default 2). Run it on an otherwise idle machine.
# Usage: [MATX_INCLUDE=/path/to/MatX/include [MATX_REV=commit]] [REPEAT=N] bench/compile/measure.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
cuda_include=$(dirname "$nvcc")/../include
repeat=${REPEAT:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Best CPU seconds (user + sys) of `repeat` runs of the command.
cpu_seconds() {
  local best=""
  for ((i = 0; i < repeat; ++i)); do
    /usr/bin/time -f "%U %S" -o "$work/time" "$@" >"$work/out" 2>&1 || { cat "$work/out" >&2; return 1; }
    local s
    s=$(awk '{printf "%.1f", $1 + $2}' "$work/time")
    if [ -z "$best" ] || awk -v a="$s" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$s; fi
  done
  echo "$best"
}

echo "| what | CPU s |"
echo "|---|---|"
sim_flags=(-std=gnu++20 -O2 -DTESSEL_BACKEND_SIM=1 -DTESSEL_SEPARATE_RUNTIME=1 -isystem "$root/include" -isystem "$root/kernels" -isystem "$cuda_include")
for h in tessel.hpp runtime/rt.hpp memory/allocator.hpp tensor/tensor.hpp ops/assign.hpp ops/reduce.hpp ops/copy.hpp ops/rows.hpp ops/sort.hpp; do
  printf '#include <tessel/%s>\nint main() { return 0; }\n' "$h" >"$work/empty.cpp"
  echo "| sim, g++ -O2: empty main including tessel/$h | $(cpu_seconds g++ "${sim_flags[@]}" -c "$work/empty.cpp" -o "$work/empty.o") |"
done
echo "| sim, g++ -O2: small_tessel.cu | $(cpu_seconds g++ "${sim_flags[@]}" -x c++ -c bench/compile/small_tessel.cu -o "$work/small.o") |"

echo "| sim, g++ -O2: tessel/sim/runtime.cpp (once per program) | $(cpu_seconds g++ "${sim_flags[@]}" -c include/tessel/sim/runtime.cpp -o "$work/rt.o") |"

cuda_flags=(-std=c++20 -O3 -arch=sm_90)
echo "| nvcc sm_90: small_tessel.cu | $(cpu_seconds "$nvcc" "${cuda_flags[@]}" -DTESSEL_BACKEND_CUDA=1 -DTESSEL_SEPARATE_RUNTIME=1 -isystem "$root/include" -isystem "$root/kernels" -c bench/compile/small_tessel.cu -o "$work/t.o") |"
echo "| nvcc sm_90: tessel/cuda/runtime.cu (once per program) | $(cpu_seconds "$nvcc" "${cuda_flags[@]}" -DTESSEL_BACKEND_CUDA=1 -DTESSEL_SEPARATE_RUNTIME=1 -isystem "$root/include" -isystem "$root/kernels" -c include/tessel/cuda/runtime.cu -o "$work/rtc.o") |"
if [ -n "${MATX_INCLUDE:-}" ]; then
  echo "| nvcc sm_90: small_matx.cu (MatX ${MATX_REV:-$(git -C "$MATX_INCLUDE/.." log -1 --format=%h 2>/dev/null || echo "at $MATX_INCLUDE")}) | $(cpu_seconds "$nvcc" "${cuda_flags[@]}" --extended-lambda --expt-relaxed-constexpr -I "$MATX_INCLUDE" -c bench/compile/small_matx.cu -o "$work/m.o") |"
else
  echo "| nvcc sm_90: small_matx.cu | (set MATX_INCLUDE) |"
fi
echo
echo "$(g++ --version | head -1); $("$nvcc" --version | tail -2 | head -1); $(nproc) cores; $(date -u +%Y-%m-%d)"
