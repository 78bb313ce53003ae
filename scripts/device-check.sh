#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU and no network (run from the repository root):
# builds every target for this GPU's architecture with all cores, runs ctest on the GPU, runs
# compute-sanitizer (memcheck, racecheck, synccheck) on the kernel tests, runs the benchmarks and
# PyTorch on the same problems (bench/torch_compare.py), and
# writes logs and JSON into $OUT (default ./device-check-out). Prints a summary table last.
# Catch2 and Google Benchmark come from .deps/*.deb when the machine lacks them
# (scripts/fetch-device-deps.sh downloads them on a machine with apt). Ends well inside 8 minutes:
# every step, the build included, takes its cap from one 465 s budget from the start, and the steps whose numbers the
# issues ask for (tests, benchmarks, PyTorch) come before the rest; compute-sanitizer runs beside
# ctest (both only need correctness, not the GPU to themselves).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/device-check-out}
build=${TESSEL_DEVICE_BUILD:-build/device}  # another folder only for a dry run (docs/device-check.md)
mkdir -p "$OUT"
export PATH="$PATH:/usr/local/cuda/bin"
jobs=${TESSEL_DEVICE_JOBS:-$(nproc)}  # another count only for a dry run (docs/device-check.md)
rows=()
row() { rows+=("$(printf '%-28s %-8s %s' "$1" "$2" "$3")"); }
# Seconds a step may take: its own cap, or what is left of the 465 s budget if less (at least 1:
# `timeout 0` would mean no limit; a step skips itself below its own minimum).
budget() { local left=$((465 - (SECONDS - t_start))); ((left < 1)) && left=1; echo $((left < $1 ? left : $1)); }
t_start=$SECONDS

# 0. The GPU as nvidia-smi sees it.
gpu=$(nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>&1 | head -1)
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
[[ $cc =~ ^[0-9]+$ ]] || cc=90  # nvidia-smi prints its failures on stdout
row "gpu" "info" "$gpu (sm_$cc)"

# 1. Dependencies without network: unpack the carried .deb files into a private prefix.
prefix_args=()
if ! compgen -G ".deps/*.deb" >/dev/null && ! ls /usr/lib/cmake/Catch2 /usr/lib/x86_64-linux-gnu/cmake/benchmark >/dev/null 2>&1; then
  row "dependencies" "FAILED" "no .deps/*.deb and no Catch2/Google Benchmark here: run scripts/fetch-device-deps.sh, carry .deps"
  printf '%s\n' "${rows[@]}" | tee "$OUT/summary.txt"
  exit 1
fi
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

# 2. Configure and build everything for this GPU, under one cap. The static kernel report is left
#    out: CI runs it without a GPU, and its one large translation unit would be the build's longest
#    step here. Tests at -O1 as the cuda preset builds them (their host code is checking loops);
#    warnings do not stop the build: this machine's compiler may be newer than CI's and warn more.
configure_args=(-G Ninja -DTESSEL_BACKEND=cuda -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$cc"
  -DTESSEL_KERNEL_REPORT=OFF -DTESSEL_TEST_OPTIMIZATION=-O1 -DTESSEL_WARNINGS_AS_ERRORS=OFF "${prefix_args[@]}")
t0=$SECONDS
#    Binaries built on the development machine with this configuration (scripts/device-prebuild.sh,
#    carried in .deps/prebuilt/) are used when they were built from this very tree for this
#    architecture: configure here, unpack them into the build folder, and check that they start (the
#    libraries they need are this machine's: the toolkit's, PyTorch's NCCL wheel, the unpacked
#    packages). Then the build from source runs beside the tests and benchmarks on cores of its own
#    (step 2b) instead of before them. Otherwise the build from source comes first, as below.
ld_library_path_before=${LD_LIBRARY_PATH-}
prebuilt=""; prebuilt_why="no .deps/prebuilt/sm_$cc.tar.xz (scripts/device-prebuild.sh)"
pack=.deps/prebuilt/sm_$cc.tar.xz
if [ -f "$pack" ]; then
  if ! bash scripts/source-manifest.sh >/tmp/tessel-sources.sha256 2>&1; then
    prebuilt_why="scripts/source-manifest.sh failed"
  elif ! cmp -s /tmp/tessel-sources.sha256 .deps/prebuilt/sources.sha256; then
    differ=$(diff .deps/prebuilt/sources.sha256 /tmp/tessel-sources.sha256 | sed -n 's/^[<>] [0-9a-f]*  //p' | sort -u)
    prebuilt_why="built from another tree: $(grep -c . <<<"$differ") file(s) differ (changed, added or gone), e.g. $(head -3 <<<"$differ" | paste -sd' ')"
  elif ! timeout -k 10 "$(budget 90)" cmake -S . -B "$build" "${configure_args[@]}" >"$OUT/build.log" 2>&1; then
    prebuilt_why="the configure failed (build.log)"
  elif ! { if command -v xz >/dev/null; then xz -dc "$pack"; else python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$pack"; fi; } |
         tar -C "$build" -xf - >>"$OUT/build.log" 2>&1; then
    prebuilt_why="unpacking $pack failed (build.log)"
  else
    # The binaries' run paths name the development machine's folders; these are this machine's.
    libdirs=$(sed -n 's/^\(CUDA_CUDART\|CUDA_cublas_LIBRARY\|CUDA_cublasLt_LIBRARY\|TESSEL_NCCL_LIBRARY\|TESSEL_CUDNN_LIBRARY\):FILEPATH=\(\/.*\)\/[^/]*$/\2/p' \
      "$build/CMakeCache.txt" | awk '!seen[$0]++' | paste -sd:)
    export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # not for PyTorch (step 6)
    # Every library each binary needs is found (ldd says "not found" otherwise), and one starts.
    missing=$(cd "$build" && grep -v '\.a$' "$OLDPWD/.deps/prebuilt/files.txt" | while read -r f; do
      ldd "$f" 2>&1 | sed -n "s|^[[:space:]]*\([^ ]*\) => not found|$f: \1|p"; done)
    echo "${missing:-every library found}" >>"$OUT/build.log"
    if [ -z "$missing" ] && "$build/tools/tessel-info" --help >>"$OUT/build.log" 2>&1; then
      prebuilt=yes
      row "build (cuda, sm_$cc)" "prebuilt" "configured here, $(wc -l <.deps/prebuilt/files.txt) binaries from .deps/prebuilt ($(paste -sd' ' .deps/prebuilt/info)) ($((SECONDS - t0)) s)"
    else
      prebuilt_why="they do not start here: ${missing:-tessel-info --help failed} (build.log)"
      tail -20 "$OUT/build.log"
      (cd "$build" && tr '\n' '\0' <"$OLDPWD/.deps/prebuilt/files.txt" | xargs -0 rm -f)  # the build below makes its own
    fi
  fi
fi
if [ -z "$prebuilt" ]; then
  [ -f "$pack" ] && row "prebuilt binaries" "unused" "$prebuilt_why"
  t0=$SECONDS
  cap=$(budget 270)
  #  What the later steps need most is built first (the test binary, the benchmarks, tessel-info),
  #  then the rest; ninja keeps going past a failing file (-k 0), and a build cut by its cap or
  #  failing somewhere goes on with the binaries it made (row PARTIAL).
  if timeout -k 10 "$cap" bash -c 'cmake -S . -B "$0" "${@:3}" &&
         { cmake --build "$0" -j "$2" --target tessel_tests tessel-bench tessel-info -- -k 0; cmake --build "$0" -j "$2" -- -k 0; }' \
       "$build" "$cc" "$jobs" "${configure_args[@]}" >>"$OUT/build.log" 2>&1; then
    row "build (cuda, sm_$cc)" "ok" "$((SECONDS - t0)) s"
  elif [ -x "$build/tests/tessel_tests" ] || [ -x "$build/bench/tessel-bench" ]; then
    row "build (cuda, sm_$cc)" "PARTIAL" "$((SECONDS - t0)) s; failed or cut: see build.log; going on with what was built"
    tail -40 "$OUT/build.log"
  else
    row "build (cuda, sm_$cc)" "FAILED" "see build.log"
    tail -40 "$OUT/build.log"
    printf '%s\n' "${rows[@]}" | tee "$OUT/summary.txt"
    exit 1
  fi
fi
# 2b. With prebuilt binaries, the build from source still runs on this machine (its compilers,
#     its libraries), into a folder of its own, niced and on cores the tests and benchmarks do not
#     use, until PyTorch's turn (step 6), whose timings include its host overhead; a build cut
#     there is PARTIAL, a compile error FAILED. Its output follows the configure in build.log.
beside_pid=""
pin=()  # taskset for the tests and benchmarks while the build beside them runs
if [ -n "$prebuilt" ]; then
  if ((jobs >= 12)) && command -v taskset >/dev/null; then
    beside_t0=$SECONDS
    rm -f /tmp/tessel-beside.rc
    echo "=== build from source beside the tests (cores 6-$((jobs - 1)))" >>"$OUT/build.log"
    setsid nice -n 19 taskset -c "6-$((jobs - 1))" bash -c 'cmake -S . -B "$0" "$@" && cmake --build "$0" -j '$((jobs - 6))' -- -k 0; echo $? >/tmp/tessel-beside.rc' \
      "$build-source" "${configure_args[@]}" >>"$OUT/build.log" 2>&1 &
    beside_pid=$!
    pin=(taskset -c 0-5)
  else
    row "build from source (beside)" "SKIPPED" "$jobs cores or no taskset: the prebuilt binaries are used unchecked by a build here"
  fi
fi
trap '[ -n "$beside_pid" ] && kill -TERM -- "-$beside_pid" 2>/dev/null' EXIT  # never left running
finish_beside() {  # stops the build beside (step 2b) and says how far it came
  [ -n "$beside_pid" ] || return 0
  # ninja puts each compiler job in a group of its own (and stops them on TERM); the session holds all.
  kill -0 "$beside_pid" 2>/dev/null && { kill -TERM -- "-$beside_pid" 2>/dev/null; sleep 2; pkill -KILL -s "$beside_pid" 2>/dev/null; }
  wait "$beside_pid" 2>/dev/null
  local steps; steps=$(grep -o '^\[[0-9]*/[0-9]*\]' "$OUT/build.log" | tail -1)
  if [ -f /tmp/tessel-beside.rc ] && [ "$(cat /tmp/tessel-beside.rc)" = 0 ]; then
    row "build from source (beside)" "ok" "$((SECONDS - beside_t0)) s, ${steps:-nothing to build}"
  elif [ -f /tmp/tessel-beside.rc ]; then
    row "build from source (beside)" "FAILED" "exit $(cat /tmp/tessel-beside.rc) after $((SECONDS - beside_t0)) s, $steps (build.log)"
  else
    row "build from source (beside)" "PARTIAL" "stopped for PyTorch's turn after $((SECONDS - beside_t0)) s at ${steps:-its first steps} (build.log)"
  fi
  beside_pid=""
  pin=()
}
# Where the configure found cuDNN and NCCL: the toolkit, else PyTorch's wheels (nvidia-cudnn-cu13,
# nvidia-nccl-cu13; cmake/tesselTargets.cmake). Without NCCL tessel::dist and its targets are not built.
# Linked only with its header (both entries set, neither *-NOTFOUND or OFF).
for lib in cudnn nccl; do
  library=$(sed -n "s/^TESSEL_${lib^^}_LIBRARY:[A-Z]*=//p" "$build/CMakeCache.txt" 2>/dev/null)
  include=$(sed -n "s/^TESSEL_${lib^^}_INCLUDE_DIR:[A-Z]*=//p" "$build/CMakeCache.txt" 2>/dev/null)
  if [[ -n $library && -n $include && $library != *NOTFOUND && $include != *NOTFOUND && $library != OFF ]]; then
    row "$lib" "info" "$library (header in $include)"
  else
    row "$lib" "info" "not found (library: ${library:-none}, header: ${include:-none}; see build.log)"
  fi
done

# 3. The whole test suite on the GPU, and beside it (4.) compute-sanitizer on the kernel tests. The
#    compile-only entries (every header alone, the kernel budgets: minutes of nvcc that CI runs
#    without a GPU) and the quick benchmark set (the whole tessel-bench, which step 5 runs alone on
#    the GPU) are left out (the find_package consumer stays: it runs its kernels here).
#    compute-sanitizer: deliberate bad launches in the tests are not its findings (API errors not
#    reported); a machine whose runtime refuses it (gVisor: "Device not supported") gets a row
#    saying so, not a failure; a missing tool is skipped.
tests=$build/tests/tessel_tests
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/compute-sanitizer/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
run_sanitizer() {
  : >"$OUT/sanitizer.log"
  local tool filter t0 rc status detail
  for tool in memcheck racecheck synccheck; do
    t0=$SECONDS
    case $tool in
      memcheck) filter="[kernel-language],[kernels]~[slow_under_tsan]" ;;
      racecheck) filter="[barrier],[warp],[mma]~[slow_under_tsan]" ;;
      synccheck) filter="[barrier],[warp],[cluster],[rows]~[slow_under_tsan]" ;;
    esac
    if [ -z "$sanitizer" ]; then echo "compute-sanitizer $tool|SKIPPED|compute-sanitizer not found"; continue; fi
    timeout -k 5 35 "${pin[@]}" "$sanitizer" --tool "$tool" --report-api-errors no --error-exitcode 99 "$tests" "$filter" >"$OUT/sanitizer.one" 2>&1
    rc=$?
    { echo "=== compute-sanitizer --tool $tool $filter (exit $rc)"; cat "$OUT/sanitizer.one"; } >>"$OUT/sanitizer.log"
    status=ok; [ $rc -eq 0 ] || status=FAILED
    detail="$(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.one" | tail -1)"
    # Cut by its cap: what it checked until then is in the log; only errors found make it a failure.
    [ $rc -eq 124 ] && status=PARTIAL && grep -qE 'ERROR SUMMARY: [1-9]' "$OUT/sanitizer.one" && status=FAILED
    if [ $rc -ne 0 ] && grep -q "Device not supported" "$OUT/sanitizer.one"; then
      status=REFUSED detail="the runtime refuses the device (see sanitizer.log)"
    fi
    rm -f "$OUT/sanitizer.one"
    echo "compute-sanitizer $tool|$status|$detail ($((SECONDS - t0)) s)"
    [ $status = REFUSED ] && break  # the other tools would be refused too
  done
}
t0=$SECONDS
run_sanitizer >"$OUT/sanitizer.rows" 2>&1 &
sanitizer_pid=$!
# examples.allreduce runs 3 ranks, a GPU each: left out on a machine with fewer.
exclude='^headers[.]|^kernels[.]budgets$|^bench[.]quick-set-and-report$'
(($(nvidia-smi -L 2>/dev/null | grep -c '^GPU') < 3)) && exclude+='|^examples[.]allreduce$'
timeout -k 10 "$(budget 110)" "${pin[@]}" ctest --test-dir $build --output-on-failure -j 4 -E "$exclude" >"$OUT/ctest.log" 2>&1
rc=$?
row "ctest" "$( ((rc == 0)) && echo ok || { ((rc == 124)) && echo TIMEOUT || echo FAILED; })" "$(grep -E 'tests passed' "$OUT/ctest.log" | tail -1) ($((SECONDS - t0)) s)"
wait $sanitizer_pid
while IFS='|' read -r name status detail; do row "$name" "$status" "$detail"; done <"$OUT/sanitizer.rows"
rm -f "$OUT/sanitizer.rows"

# 5. Every benchmark family through tessel-bench, in three runs so that a timeout in the long matrix
#    products (BM_matmul*, BM_linear*: 1024^3 .. 8192^3 and the LLM shapes, 5 dtypes) cannot take
#    the others' time, and the families the issues set goals for run first (Google Benchmark runs a
#    filter's matches in registration order, which puts the sim's and the allocator's first); the
#    three are merged into bench.json, which bench/report.py renders here later. A run cut by its
#    cap leaves its JSON without the closing brackets (Google Benchmark writes each result as it
#    finishes): the merge closes it.
t0=$SECONDS
cap=$(budget "$([ -n "$prebuilt" ] && echo 190 || echo 130)")  # the build's time, where it was saved
if ((cap < 10)); then
  row "tessel-bench" "SKIPPED" "out of time budget"
else
  # The kernels the issues measure first (element-wise, reductions, transpose, rows, sort, copy),
  # then the matrix products, then with what is left (15 s at most) the sim, launch and allocator
  # families, each run into its own file merged into bench.json.
  issue_families='^BM_(fma|cast|to_bf16|sum|row_sum|col_sum|dot|transpose|batched_permute|softmax|rms_norm|log_softmax|layer_norm|sort|Copy)'
  timeout -k 10 $((cap / 2)) "${pin[@]}" $build/bench/tessel-bench --benchmark_filter="$issue_families" --benchmark_min_time=0.1 \
    --benchmark_out="$OUT/bench.json" --benchmark_out_format=json >"$OUT/bench.log" 2>&1
  rc1=$?
  timeout -k 10 $((cap - 15 - (SECONDS - t0) > 10 ? cap - 15 - (SECONDS - t0) : 10)) "${pin[@]}" $build/bench/tessel-bench \
    --benchmark_filter='^BM_(matmul|linear)' --benchmark_min_time=0.1 \
    --benchmark_out="$OUT/bench-matmul.json" --benchmark_out_format=json >>"$OUT/bench.log" 2>&1
  rc2=$?
  rest=$((cap - (SECONDS - t0)))
  rc3=0
  if ((rest >= 5)); then
    timeout -k 5 "$rest" "${pin[@]}" $build/bench/tessel-bench \
      --benchmark_filter='^BM_(BarrierPerThread|ShufflePerThread|Launch|PlainLoop|TiledMatmul512|CachedPair|RuntimePair|PinnedCachedPair|Churn|Pipeline|expression_host_overhead)' \
      --benchmark_min_time=0.1 --benchmark_out="$OUT/bench-other.json" --benchmark_out_format=json >>"$OUT/bench.log" 2>&1
    rc3=$?
  fi
  merge_json() {
    python3 - "$1" "$2" <<'PY'
import json, os, sys
main, extra = sys.argv[1], sys.argv[2]

def load(path):
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return None
    text = open(path).read()
    for tail in ("", "\n  ]\n}", "\n}\n  ]\n}"):  # whole; cut after a result; cut inside one
        try:
            return json.loads(text + tail)
        except ValueError:
            pass
    try:  # cut right after a result's separating comma
        return json.loads(text.rstrip().rstrip(",") + "\n  ]\n}")
    except ValueError:
        pass
    body = text[: text.rfind("\n    {")]  # cut inside a result: drop it
    try:
        return json.loads(body.rstrip().rstrip(",") + "\n  ]\n}")
    except ValueError:
        print(f"merge: {path} is not readable JSON; left out")
        return None

runs = [r for r in (load(main), load(extra)) if r is not None]
if runs:
    merged = runs[0]
    merged.setdefault("benchmarks", [])
    for r in runs[1:]:
        merged["benchmarks"] += r.get("benchmarks", [])
    json.dump(merged, open(main, "w"), indent=1)
    failed = [b.get("name", "?") for b in merged["benchmarks"] if b.get("error_occurred")]
    print(f"merge: {len(merged['benchmarks'])} results in {main}, {len(failed)} failed")
    for name in failed:
        print(f"merge: failed: {name}")
if os.path.exists(extra):
    os.remove(extra)
PY
  }
  merge_json "$OUT/bench.json" "$OUT/bench-matmul.json" >>"$OUT/bench.log" 2>&1
  merge_json "$OUT/bench.json" "$OUT/bench-other.json" >>"$OUT/bench.log" 2>&1
  status=ok
  ((rc1 == 124 || rc2 == 124 || rc3 == 124)) && status=PARTIAL  # cut by its cap: the results before the cut are kept
  ((rc1 != 0 && rc1 != 124 || rc2 != 0 && rc2 != 124 || rc3 != 0 && rc3 != 124)) && status=FAILED
  # A benchmark that threw or computed a wrong result is skipped with its message (error_occurred)
  # and the run goes on: the row fails all the same.
  grep -q 'merge: .*, [1-9][0-9]* failed' "$OUT/bench.log" && status=FAILED
  row "tessel-bench" "$status" "bench.json ($((SECONDS - t0)) s; exit codes $rc1, $rc2, $rc3; $(grep -o 'merge: [0-9]* results.*' "$OUT/bench.log" | tail -1 | sed 's/ in [^,]*,/,/'))"
  cat "$OUT/bench.log" >>"$OUT/ctest.log"  # at most 8 files come back from $OUT
  rm -f "$OUT/bench.log"
fi
$build/tools/tessel-info --json >"$OUT/tessel-info.json" 2>&1
# tessel-info's NVML readings beside nvidia-smi's, same fields, same moment (issue 13's check).
fields=index,name,uuid,pci.bus_id,driver_version,memory.total,memory.used,memory.free,memory.reserved,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm,pcie.link.gen.current,pcie.link.width.current
{ echo "nvidia-smi:"; nvidia-smi --query-gpu=$fields --format=csv; echo "tessel-info:"; $build/tools/tessel-info --query=$fields --format=csv; } \
  >>"$OUT/ctest.log" 2>&1
row "tessel-info vs nvidia-smi" "$(grep -c . <<<"$(nvidia-smi -L 2>/dev/null)") GPU(s)" "both tables in ctest.log"
# The dispatch table MatmulPolicy::automatic would read, from this run (commit it as
# include/tessel/ops/matmul_table.hpp together with bench.json under bench/results/).
if [ -s "$OUT/bench.json" ]; then
  if python3 bench/matmul_table.py "$OUT/bench.json" --out "$OUT/matmul_table.hpp" >>"$OUT/ctest.log" 2>&1; then
    row "matmul table" "ok" "matmul_table.hpp"
  else
    row "matmul table" "FAILED" "bench/matmul_table.py failed: see ctest.log"
  fi
fi

# 6. PyTorch on the same problems (bench/torch_compare.py: eager, and torch.compile where it
#    compiles offline), for the "% of torch" column of bench/report.py.
finish_beside
t0=$SECONDS
cap=$(budget 80)
if ((cap < 20)); then
  row "torch_compare" "SKIPPED" "out of time budget"
elif ! LD_LIBRARY_PATH=$ld_library_path_before python3 -c "import torch" 2>/dev/null; then
  row "torch_compare" "SKIPPED" "no PyTorch on this machine"
else
  LD_LIBRARY_PATH=$ld_library_path_before timeout -k 10 "$cap" python3 bench/torch_compare.py --out "$OUT/torch.json" --budget $((cap - 15)) >>"$OUT/ctest.log" 2>&1
  rc=$?
  status=ok; [ $rc -eq 0 ] || status=FAILED
  [ $rc -eq 124 ] && status=PARTIAL  # cut by its cap: torch.json still holds every timing taken before
  rm -f "$OUT/torch.json.tmp"         # a save cut short (at most 8 files come back from $OUT)
  row "torch_compare" "$status" "torch.json, $(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["benchmarks"]))' "$OUT/torch.json" 2>/dev/null || echo 0) timings ($((SECONDS - t0)) s)"
fi

# 7. A process per GPU through tessel-run, and collectives as nccl-tests measures them (after
#    PyTorch: the kernels' numbers first).
if ((budget_left=$(budget 40), budget_left >= 20)); then
  t0=$SECONDS
  timeout -k 5 $((budget_left / 2)) $build/tools/tessel-run -n 1 $build/tests/dist_worker collectives >>"$OUT/ctest.log" 2>&1
  rc1=$?
  timeout -k 5 $((budget_left / 2)) $build/bench/tessel-collectives-bench -b 8 -e 1G -f 4 --iters 10 --warmup 3 >>"$OUT/ctest.log" 2>&1
  rc2=$?
  row "dist: tessel-run, bench" "$( ((rc1 == 0 && rc2 == 0)) && echo ok || echo FAILED)" "exit codes $rc1, $rc2 ($((SECONDS - t0)) s)"
fi

# The benchmark lines first, the table last: the tool that runs this keeps only the output's tail.
grep -E '^BM_' "$OUT/ctest.log" >"$OUT/summary.txt"
cat "$OUT/summary.txt"
echo
echo "device check, $(date -u +%Y-%m-%dT%H:%MZ), $((SECONDS - t_start)) s"
printf '%s\n' "${rows[@]}" | tee -a "$OUT/summary.txt"
! printf '%s\n' "${rows[@]}" | grep -qE ' (FAILED|TIMEOUT) '
