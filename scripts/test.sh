#!/usr/bin/env bash
# Runs the whole test suite (unit, golden and CLI tests) of the build in build/
# (or in the folder given as $1). Shared models are read from ../shared, or
# from LOOM_SHARED_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
[ -d "$build" ] || { echo "test: no build in '$build'; run ./scripts/setup.sh first" >&2; exit 1; }
cmake --build "$build"
export LOOM_SHARED_DIR="${LOOM_SHARED_DIR:-$(cd .. && pwd)/shared}"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
