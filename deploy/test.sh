#!/usr/bin/env bash
# Installs the Debian packages wsync needs, builds everything and runs every test that needs no
# GPU (GPU tests skip themselves on machines without one). Fails if anything fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${WSYNC_BUILD_DIR:-build}

deploy/install-deps.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWSYNC_CUDA=AUTO
cmake --build "$build" -- -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure --timeout 300 -j2 -LE bench
