#!/usr/bin/env bash
# Downloads (does not install) the Debian packages the CUDA build's tests and benchmarks need into
# .deps/, for a GPU machine without network: scripts/device-check.sh unpacks them there.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps
cd .deps
apt-get download catch2 libbenchmark-dev libbenchmark1debian libdlpack-dev >/dev/null
ls -1 *.deb
