#!/usr/bin/env bash
# Compiles the kernel report's two sources for sm_90, device code only (nvcc -cubin): the public
# ops' kernels (tools/kernel-report/kernels.cu) and the runtime's copy kernels (tessel/cuda/runtime.cu);
# then tools/kernel-report/ptx_wrappers.cu, so ptxas assembles every inline-PTX wrapper (not reported).
# Writes OUT/ptxas.log (-Xptxas -v of both) and, when cuobjdump is found, OUT/sass.txt.
# Usage: compile.sh NVCC SOURCE_DIR OUT [CUOBJDUMP]
set -euo pipefail
nvcc=$1 src=$2 out=$3 cuobjdump=${4:-}
mkdir -p "$out"
flags=(-std=c++20 --expt-relaxed-constexpr -arch=sm_90 -cubin -O3 -DTESSEL_BACKEND_CUDA=1 -DTESSEL_SEPARATE_RUNTIME=1
       -I"$src/include" -I"$src/kernels" -Xptxas -v)
: >"$out/ptxas.log.new"
for unit in tools/kernel-report/kernels.cu include/tessel/cuda/runtime.cu; do
  name=$(basename "$unit" | sed 's/\.cu$//')
  if ! "$nvcc" "${flags[@]}" -o "$out/$name.cubin" "$src/$unit" 2>>"$out/ptxas.log.new"; then
    grep -v '^ptxas info\|^    ' "$out/ptxas.log.new" >&2
    exit 1
  fi
done
# Every inline-PTX wrapper assembled once (not in the report: its output is not kept).
if ! "$nvcc" -std=c++20 -arch=sm_90 -cubin -O3 -DTESSEL_BACKEND_CUDA=1 -I"$src/include" -o "$out/ptx_wrappers.cubin" "$src/tools/kernel-report/ptx_wrappers.cu"; then
  exit 1
fi
mv "$out/ptxas.log.new" "$out/ptxas.log"
rm -f "$out/sass.txt"
if [ -n "$cuobjdump" ] && [ -x "$cuobjdump" ]; then
  export PATH="$(dirname "$cuobjdump"):$PATH"  # it runs the nvdisasm beside it
  for cubin in "$out"/kernels.cubin "$out"/runtime.cubin; do "$cuobjdump" -sass "$cubin"; done >"$out/sass.txt.new"
  mv "$out/sass.txt.new" "$out/sass.txt"
fi
