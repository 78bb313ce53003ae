#!/usr/bin/env bash
# README command (2): the whole test suite on a machine with the CUDA toolkit, GPU or not.
#   sim       the sim backend: every kernel, runtime and sim test (at -O1), the bad-input suite, the
#             fuzzer, header self-containment; examples, tools, benchmarks; the find_package consumer
#   sim-asan  the test suite and the bad-input suite under AddressSanitizer + UndefinedBehaviorSanitizer
#             (-Og), with the tensor-overrun checks
#   sim-tsan  the same with a block's threads as OS threads under ThreadSanitizer, plus the race check
#   cuda      every target built by nvcc for sm_90 with warnings as errors; its tests run on a GPU
#             and report themselves skipped without one
# Usage: scripts/test.sh [preset ...]   (default: all four)
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
scripts/install-deps.sh || exit 1

presets=("$@")
((${#presets[@]})) || presets=(sim sim-asan sim-tsan cuda)
jobs=$(nproc)
passed=0 failed=0 skipped=0 failures=()
start=$SECONDS
for preset in "${presets[@]}"; do
  t0=$SECONDS
  echo "=== $preset: configure and build"
  if ! cmake --preset "$preset" >"build-$preset.configure.log" 2>&1; then
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
