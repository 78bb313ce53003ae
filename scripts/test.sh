#!/usr/bin/env bash
# README command (2): the whole test suite on a machine with the CUDA toolkit, GPU or not.
#   sim       the sim backend: every kernel, runtime and sim test (at -O1), the bad-input suite, the
#             fuzzer, header self-containment; examples, tools, benchmarks; the find_package consumer
#   sim-asan  the test suite and the bad-input suite under AddressSanitizer + UndefinedBehaviorSanitizer
#             (-Og), with the tensor-overrun checks
#   sim-tsan  the test suite with a block's threads as OS threads under ThreadSanitizer, plus the race
#             check (without the sweeps and value tests that have no threads to race: docs/sim.md)
#   cuda      every target built by nvcc for sm_90 with warnings as errors; its tests run on a GPU
#             and report themselves skipped without one (then device code is built at -O0, the
#             test programs' host code at -O0 and the rest at -O1; the kernel report compiles the
#             library's kernels at -O3)
# Usage: scripts/test.sh [preset ...]   (default: all four)
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
scripts/install-deps.sh || exit 1

presets=("$@")
((${#presets[@]})) || presets=(sim sim-asan sim-tsan cuda)
jobs=$(nproc)
# g++ trades memory for time (TESSEL_COMPILER_MEMORY_FOR_SPEED, up to 7 GB a compile) where each
# parallel job has 8 GiB.
mem_kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null || echo 0)
for limit in /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes; do  # a container's cap
  if [ -r "$limit" ] && read -r bytes <"$limit" && [[ $bytes =~ ^[0-9]+$ ]] && ((bytes / 1024 < mem_kib)); then
    mem_kib=$((bytes / 1024))
  fi
done
compiler_memory=OFF
((mem_kib / jobs >= 8 * 1024 * 1024)) && compiler_memory=ON
passed=0 failed=0 skipped=0 failures=()
start=$SECONDS
for preset in "${presets[@]}"; do
  t0=$SECONDS
  echo "=== $preset: configure and build"
  extra=("-DTESSEL_COMPILER_MEMORY_FOR_SPEED=$compiler_memory")
  if [ "$preset" = cuda ] && ! { [ -e /dev/nvidia0 ] || { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }; }; then
    # Without a GPU the cuda preset's tests and benchmarks are compiled and linked but skipped, so
    # their device code is compiled unoptimised (cicc and ptxas -O0): tests/ops/test_matmul.cu takes
    # 28 s instead of 114 s, nearly all of it the matrix kernels' optimising device compile
    # (docs/compile-time.md). What the optimiser makes of every kernel the library dispatches is
    # the kernel report's (kernels.budgets: registers, spills, stack, main loops), compiled at -O3
    # in the same preset. Host code at -O1 in the runtime library, tools, examples and benchmarks
    # (which reach the host side of every operation family but quantize), where g++'s warnings that need an optimiser
    # (-Wmaybe-uninitialized) still run; at -O0 in the test programs, which only link here
    # (test_reduce.cu 58 s -> 38 s). Device code is compiled to PTX only
    # (90-virtual: no ptxas, 22 of test_reduce.cu's 69 s); ptxas assembles every kernel the library
    # dispatches, and every inline-PTX wrapper, in the kernel report. With a GPU the preset's levels
    # apply: `cmake --preset cuda` sets all of these back.
    extra+=("-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" "-DCMAKE_CUDA_FLAGS_RELEASE=-O1 -DNDEBUG" "-DTESSEL_TEST_OPTIMIZATION=-O0"
            "-DCMAKE_CUDA_FLAGS=-Xcicc -O0 -Xptxas -O0"
            "-DCMAKE_CUDA_ARCHITECTURES=90-virtual")
  fi
  if ! cmake --preset "$preset" "${extra[@]+"${extra[@]}"}" >"build-$preset.configure.log" 2>&1; then
    cat "build-$preset.configure.log"; failures+=("$preset: configure"); ((failed++)); continue
  fi
  rm -f "build-$preset.configure.log"
  if ! cmake --build --preset "$preset" -j "$jobs"; then
    failures+=("$preset: build"); ((failed++)); continue
  fi
  echo "=== $preset: test"
  log="build/$preset/ctest.log"
  ctest --preset "$preset" -j "$jobs" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  p=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* Passed' "$log")
  s=$(grep -cE '\*\*\*Skipped' "$log")
  f=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*(Failed|Timeout|Exception|Not Run)' "$log")
  ((rc == 0 || f > 0)) || f=1  # ctest failed in a way its per-test lines do not show
  passed=$((passed + p)); skipped=$((skipped + s)); failed=$((failed + f))
  ((f == 0)) || failures+=("$preset: $f test(s) failed")
  echo "=== $preset: $p passed, $f failed, $s skipped in $((SECONDS - t0)) s"
done
echo
echo "tessel test suite: presets ${presets[*]} in $((SECONDS - start)) s"
for x in "${failures[@]}"; do echo "  FAILED $x"; done
echo "total: $passed passed, $failed failed, $skipped skipped"
((failed == 0))
