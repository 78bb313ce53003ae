#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU and no network (run from the repository root):
# builds every target for this GPU's architecture with all cores, runs ctest on the GPU, runs
# compute-sanitizer (memcheck, racecheck, synccheck) on the kernel tests, runs the benchmarks and
# PyTorch on the same problems (bench/torch_compare.py), and
# writes logs and JSON into $OUT (default ./device-check-out). Prints a summary table last.
# Catch2 and Google Benchmark come from .deps/*.deb when the machine lacks them
# (scripts/fetch-device-deps.sh downloads them on a machine with apt). Ends well inside 8 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-check-out}
build=${TESSEL_DEVICE_BUILD:-build/device}  # another folder only for a dry run (docs/device-check.md)
mkdir -p "$OUT"
export PATH="$PATH:/usr/local/cuda/bin"
jobs=$(nproc)
rows=()
row() { rows+=("$(printf '%-28s %-8s %s' "$1" "$2" "$3")"); }
# Seconds a step may take: its own cap, or what is left of the 465 s budget if less (0: skip it).
budget() { local left=$((465 - (SECONDS - t_start))); ((left < 0)) && left=0; echo $((left < $1 ? left : $1)); }
t_start=$SECONDS

# 0. The GPU as nvidia-smi sees it.
gpu=$(nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>&1 | head -1)
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
[ -n "$cc" ] || cc=90
row "gpu" "info" "$gpu (sm_$cc)"

# 1. Dependencies without network: unpack the carried .deb files into a private prefix.
prefix_args=()
if compgen -G ".deps/*.deb" >/dev/null; then
  deps=/tmp/tessel-deps
  rm -rf "$deps"; mkdir -p "$deps"
  for f in .deps/*.deb; do dpkg-deb -x "$f" "$deps"; done
  prefix_args=(-DCMAKE_PREFIX_PATH="$deps/usr")
  if [ -d "$deps/usr/lib/x86_64-linux-gnu/openblas-pthread" ]; then
    prefix_args+=(-DTESSEL_OPENBLAS_ROOT="$deps/usr")
    # OpenBLAS's own dependency (libgfortran) is not on the executables' run path.
    export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
fi

# 2. Configure and build everything for this GPU.
t0=$SECONDS
# The static kernel report is left out: CI runs it without a GPU, and its one large translation
# unit would be the build's longest step here.
if timeout 330 cmake -S . -B $build -G Ninja -DTESSEL_BACKEND=cuda -DCMAKE_BUILD_TYPE=Release \
     -DCMAKE_CUDA_ARCHITECTURES="$cc" -DTESSEL_KERNEL_REPORT=OFF "${prefix_args[@]}" >"$OUT/build.log" 2>&1 &&
   timeout 330 cmake --build $build -j "$jobs" >>"$OUT/build.log" 2>&1; then
  row "build (cuda, sm_$cc)" "ok" "$((SECONDS - t0)) s"
else
  row "build (cuda, sm_$cc)" "FAILED" "see build.log"
  tail -40 "$OUT/build.log"
  printf '%s\n' "${rows[@]}" | tee "$OUT/summary.txt"
  exit 1
fi

# 3. The whole test suite on the GPU. The compile-only entries (every header alone, the kernel
#    budgets: minutes of nvcc that CI runs without a GPU) are left out so that the 150 s go to the
#    tests that need the device (the find_package consumer stays: it runs its kernels here).
t0=$SECONDS
timeout 150 ctest --test-dir $build --output-on-failure -j 4 -E '^headers[.]|^kernels[.]budgets$' >"$OUT/ctest.log" 2>&1
rc=$?
row "ctest" "$([ $rc -eq 0 ] && echo ok || echo FAILED)" "$(grep -E 'tests passed' "$OUT/ctest.log" | tail -1) ($((SECONDS - t0)) s)"

# 4. compute-sanitizer on the kernel tests. A machine whose runtime refuses it (gVisor: "Device not
#    supported") gets a row saying so, not a failure; a missing tool is skipped.
tests=$build/tests/tessel_tests
: >"$OUT/sanitizer.log"
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/compute-sanitizer/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck synccheck; do
  t0=$SECONDS
  filter="[kernel-language],[kernels]"
  [ "$tool" = racecheck ] && filter="[barrier],[warp],[matmul]"
  if [ -z "$sanitizer" ]; then row "compute-sanitizer $tool" "SKIPPED" "compute-sanitizer not found"; continue; fi
  cap=$(budget 60)
  if ((cap < 10)); then row "compute-sanitizer $tool" "SKIPPED" "out of time budget"; continue; fi
  timeout "$cap" "$sanitizer" --tool "$tool" --error-exitcode 99 "$tests" "$filter" >"$OUT/sanitizer.one" 2>&1
  rc=$?
  { echo "=== compute-sanitizer --tool $tool $filter (exit $rc)"; cat "$OUT/sanitizer.one"; } >>"$OUT/sanitizer.log"
  status=ok; [ $rc -eq 0 ] || status=FAILED
  [ $rc -eq 124 ] && status=TIMEOUT
  detail="$(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.one" | tail -1)"
  if [ $rc -ne 0 ] && grep -q "Device not supported" "$OUT/sanitizer.one"; then
    status=REFUSED detail="the runtime refuses the device (see sanitizer.log)"
  fi
  rm -f "$OUT/sanitizer.one"
  row "compute-sanitizer $tool" "$status" "$detail ($((SECONDS - t0)) s)"
  [ $status = REFUSED ] && break  # the other tools would be refused too
done

# 5. Every benchmark family through tessel-bench, in two runs so that a timeout in the long matrix
#    products (BM_matmul*, BM_linear*: 1024^3 .. 8192^3 and the LLM shapes, 5 dtypes) cannot lose the
#    others' JSON (Google Benchmark writes it at the end); the two are merged into bench.json, which
#    bench/report.py renders here later.
t0=$SECONDS
cap=$(budget 150)
if ((cap < 10)); then
  row "tessel-bench" "SKIPPED" "out of time budget"
else
  timeout $((cap / 3)) $build/bench/tessel-bench --benchmark_filter='^BM_(?!matmul|linear)' --benchmark_min_time=0.2 \
    --benchmark_out="$OUT/bench.json" --benchmark_out_format=json >"$OUT/bench.log" 2>&1
  rc1=$?
  timeout $((cap - (SECONDS - t0))) $build/bench/tessel-bench --benchmark_filter='^BM_(matmul|linear)' --benchmark_min_time=0.1 \
    --benchmark_out="$OUT/bench-matmul.json" --benchmark_out_format=json >>"$OUT/bench.log" 2>&1
  rc2=$?
  python3 - "$OUT/bench.json" "$OUT/bench-matmul.json" <<'PY' >>"$OUT/bench.log" 2>&1
import json, os, sys
main, extra = sys.argv[1], sys.argv[2]
runs = [json.load(open(p)) for p in (main, extra) if os.path.exists(p) and os.path.getsize(p) > 0]
if runs:
    merged = runs[0]
    for r in runs[1:]:
        merged["benchmarks"] += r["benchmarks"]
    json.dump(merged, open(main, "w"), indent=1)
if os.path.exists(extra):
    os.remove(extra)
PY
  row "tessel-bench" "$( ((rc1 == 0 && rc2 == 0)) && echo ok || echo FAILED)" "bench.json ($((SECONDS - t0)) s; exit codes $rc1, $rc2)"
  cat "$OUT/bench.log" >>"$OUT/ctest.log"  # at most 8 files come back from $OUT
  rm -f "$OUT/bench.log"
fi
$build/tools/tessel-info --json >"$OUT/tessel-info.json" 2>&1
# tessel-info's NVML readings beside nvidia-smi's, same fields, same moment (issue 13's check).
fields=index,name,memory.total,memory.used,memory.free,memory.reserved,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm,pcie.link.gen.current,pcie.link.width.current
{ echo "nvidia-smi:"; nvidia-smi --query-gpu=$fields --format=csv; echo "tessel-info:"; $build/tools/tessel-info --query=$fields --format=csv; } \
  >>"$OUT/ctest.log" 2>&1
row "tessel-info vs nvidia-smi" "$(grep -c . <<<"$(nvidia-smi -L 2>/dev/null)") GPU(s)" "both tables in ctest.log"
# A process per GPU through tessel-run, and collectives as nccl-tests measures them.
if ((budget_left=$(budget 40), budget_left >= 20)); then
  t0=$SECONDS
  timeout 20 $build/tools/tessel-run -n 1 $build/tests/dist_worker collectives >>"$OUT/ctest.log" 2>&1
  rc1=$?
  timeout 20 $build/bench/tessel-collectives-bench -b 8 -e 1G -f 4 --iters 10 --warmup 3 >>"$OUT/ctest.log" 2>&1
  rc2=$?
  row "dist: tessel-run, bench" "$( ((rc1 == 0 && rc2 == 0)) && echo ok || echo FAILED)" "exit codes $rc1, $rc2 ($((SECONDS - t0)) s)"
fi
# The dispatch table MatmulPolicy::automatic would read, from this run (commit it as
# include/tessel/ops/matmul_table.hpp together with bench.json under bench/results/).
[ -s "$OUT/bench.json" ] && python3 bench/matmul_table.py "$OUT/bench.json" --out "$OUT/matmul_table.hpp" >>"$OUT/ctest.log" 2>&1

# 6. PyTorch on the same problems (bench/torch_compare.py: eager, and torch.compile where it
#    compiles offline), for the "% of torch" column of bench/report.py.
t0=$SECONDS
cap=$(budget 90)
if ((cap < 20)); then
  row "torch_compare" "SKIPPED" "out of time budget"
elif ! python3 -c "import torch" 2>/dev/null; then
  row "torch_compare" "SKIPPED" "no PyTorch on this machine"
else
  timeout "$cap" python3 bench/torch_compare.py --out "$OUT/torch.json" --budget $((cap - 15)) >>"$OUT/ctest.log" 2>&1
  rc=$?
  status=ok; [ $rc -eq 0 ] || status=FAILED
  [ $rc -eq 124 ] && status=TIMEOUT  # torch.json still holds every timing taken before the cut
  row "torch_compare" "$status" "torch.json, $(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["benchmarks"]))' "$OUT/torch.json" 2>/dev/null || echo 0) timings ($((SECONDS - t0)) s)"
fi

echo
echo "device check, $(date -u +%Y-%m-%dT%H:%MZ), $((SECONDS - t_start)) s"
printf '%s\n' "${rows[@]}" | tee "$OUT/summary.txt"
grep -E '^BM_' "$OUT/ctest.log" | tee -a "$OUT/summary.txt"
! printf '%s\n' "${rows[@]}" | grep -qE ' (FAILED|TIMEOUT) '
