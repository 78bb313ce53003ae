#!/usr/bin/env bash
# Builds here (no GPU needed) what scripts/device-check.sh would build on the GPU machine, with the
# same configuration, and packs the binaries into .deps/prebuilt/ for the call to carry with .deps:
# the check then spends its 8 minutes on tests and benchmarks instead of a cold build on the
# device (docs/device-check.md, "Binaries built here"). The check uses them only where its tree
# prints the same scripts/source-manifest.sh list and the GPU's architecture is the one built here;
# otherwise it builds from source as before. About 25 minutes on 2 cores the first time; later runs
# rebuild only what changed.
#   bash scripts/device-prebuild.sh [ARCH]      # ARCH: compute capability without the dot, default 90
set -euo pipefail
cd "$(dirname "$0")/.."
cc=${1:-90}
build=build/device-prebuilt
compgen -G ".deps/*.deb" >/dev/null || { echo "no .deps/*.deb: run scripts/fetch-device-deps.sh first" >&2; exit 1; }
git diff --quiet HEAD -- . ':!docs' ':!*.md' || echo "note: the tree has uncommitted changes; the manifest records the files as they are now"
# The packages are unpacked where device-check.sh unpacks them, so that the run paths CMake writes
# into the binaries (Google Benchmark's, OpenBLAS's folders) are the device's too. A dry run of
# device-check.sh here unpacks there as well: not both at once (the build's links would fail).
deps=/tmp/tessel-deps
rm -rf "$deps"; mkdir -p "$deps"
for f in .deps/*.deb; do dpkg-deb -x "$f" "$deps"; done
export PATH="$PATH:/usr/local/cuda/bin"
# The check's own configure line (scripts/device-check.sh, step 2).
cmake -S . -B "$build" -G Ninja -DTESSEL_BACKEND=cuda -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="$cc" -DTESSEL_KERNEL_REPORT=OFF -DTESSEL_TEST_OPTIMIZATION=-O1 \
  -DTESSEL_WARNINGS_AS_ERRORS=OFF -DCMAKE_PREFIX_PATH="$deps/usr" -DTESSEL_OPENBLAS_ROOT="$deps/usr" >/dev/null
# The manifest is taken before the build: a file edited while it runs then fails the check's
# comparison (binaries unused) instead of passing with binaries built from its older text.
manifest=$(bash scripts/source-manifest.sh)
nice cmake --build "$build" -j "$(nproc)"
# Every ELF file the build made (executables, the runtime library), not the objects or what the
# tests build for themselves when they run (tests/consumer).
out=.deps/prebuilt
rm -rf "$out"; mkdir -p "$out"
# The per-family benchmark executables (bench/bench_<family>) are left out: tessel-bench holds every
# family and is what the check runs; the build beside the tests makes them there.
(cd "$build" && find . -type f -not -path '*/CMakeFiles/*' -not -path './tests/consumer/*' -not -name '*.o' \
   -not -path './bench/bench_*' \( -perm -u+x -o -name '*.a' -o -name '*.so' \) -print0 |
   while IFS= read -r -d '' f; do
     if [[ $f == *.a ]] || head -c 4 "$f" | grep -q ELF; then printf '%s\0' "$f"; fi
   done) >"$out/files"
# xz: 24 MB where gzip gave 39 (2026-12-07), which matters under the call's 64 MiB.
tar -C "$build" --null -T "$out/files" -cf - | xz -T0 -6 >"$out/sm_$cc.tar.xz"
tr '\0' '\n' <"$out/files" >"$out/files.txt"; rm "$out/files"
printf '%s\n' "$manifest" >"$out/sources.sha256"
bash scripts/source-manifest.sh | cmp -s - "$out/sources.sha256" ||
  echo "warning: sources changed during the build: the check will not use these binaries; run this again" >&2
{ echo "arch=$cc"
  echo "commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' ':!*.md' || echo +changes)"
  echo "built=$(date -u +%Y-%m-%dT%H:%MZ)"
  echo "nvcc=$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "host=$(${CXX:-g++} -dumpfullversion 2>/dev/null || echo unknown)"; } >"$out/info"
cat "$out/info"
# The device tool carries at most 64 MiB: the tree's files (git ls-files) and .deps together.
tree=$(git ls-files -z | xargs -0 cat | wc -c)
deps_bytes=$(du -sb .deps | cut -f1)
echo "$(wc -l <"$out/files.txt") files, $(du -h "$out/sm_$cc.tar.xz" | cut -f1) packed in $out/sm_$cc.tar.xz;" \
  "carried: .deps $((deps_bytes >> 20)) MiB + tree $((tree >> 20)) MiB of the call's 64 MiB"
if ((deps_bytes + tree > 62 << 20)); then
  echo "error: over the device tool's limit (62 MiB kept as margin): the call would be refused" >&2
  exit 1
fi
