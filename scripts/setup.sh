#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages the build needs (only those missing), then configures and
# builds replayssm in Release into ${RSSM_BUILD_DIR:-build}. The CUDA backend is compiled when nvcc
# is found (on PATH or in /usr/local/cuda/bin); no GPU is needed to build.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${RSSM_BUILD_DIR:-$root/build}

packages=(cmake ninja-build g++ make pkg-config libgtest-dev libgmock-dev libbenchmark-dev
          nlohmann-json3-dev libcli11-dev libfmt-dev libopenblas-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release ${RSSM_CMAKE_ARGS:-}
fi
# RSSM_TARGETS (e.g. replayssm_cli) builds only those targets: the main job needs only the CLI.
cmake --build "$build" -j "$(nproc)" ${RSSM_TARGETS:+--target $RSSM_TARGETS}
