#!/usr/bin/env bash
# The static kernel report (no GPU needed): compiles every kernel instantiation the library
# dispatches to for sm_90 (tools/kernel-report/kernels.cu and the runtime's copy kernels), reads
# -Xptxas -v and the SASS (cuobjdump, installed by scripts/install-deps.sh into .deps/cuda-tools),
# rewrites the report section of docs/kernels.md and checks every kernel's budget (the
# '// budget:' line above it in kernels/tessel/kernels/). Exits 1 if a kernel is over budget.
# The cuda preset's ctest entry kernels.budgets runs the same check on every build.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
scripts/install-deps.sh
out=build/kernel-report
cuobjdump=.deps/cuda-tools/nvidia/cu13/bin/cuobjdump
[ -x "$cuobjdump" ] || cuobjdump=$(command -v cuobjdump || true)
tools/kernel-report/compile.sh "$(command -v nvcc)" "$PWD" "$out" "$cuobjdump"
sass=()
[ -f "$out/sass.txt" ] && sass=(--sass "$out/sass.txt")
python3 tools/kernel-report/report.py markdown --ptxas "$out/ptxas.log" "${sass[@]}" --kernels kernels/tessel/kernels \
  --out docs/kernels.md --json "$out/kernels.json"
