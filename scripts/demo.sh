#!/usr/bin/env bash
# README command one: set up, build, and run the main job (extra arguments go to `replayssm demo`).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
exec "${RSSM_BUILD_DIR:-$root/build}/apps/replayssm" demo "$@"
