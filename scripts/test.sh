#!/usr/bin/env bash
# README command two: set up, build, and run the whole test suite. Tests that need a GPU skip,
# with the reason printed, when no CUDA device is present.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
build=${RSSM_BUILD_DIR:-$root/build}
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" --timeout 1200 "$@"
