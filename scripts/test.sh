#!/usr/bin/env bash
# README command two: set up, build, and run the whole test suite. Tests that need a GPU skip
# when no CUDA device is present; the reason is printed at the end.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh" >&2  # build output on stderr, as demo.sh: stdout is the test results
source "$root/scripts/env.sh"
build=${RSSM_BUILD_DIR:-$root/build}
status=0
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" --timeout 1200 "$@" || status=$?
device=$("$build/apps/replayssm" info | sed -n 's/^cuda device: //p')
case "$device" in
  "no CUDA device"*|*"without the CUDA backend"*) echo "GPU tests were skipped: $device" ;;
  *) echo "GPU tests ran on: $device" ;;
esac
exit $status
