#!/usr/bin/env bash
# One call on the GPU machine (see /work/.library/device): configure for the H200 (sm_90a), build
# the tests, the CLI and the kernel benchmark, run the GPU tests, then the kernel benchmark, and
# write logs and results under $OUT (at most 8 files come back). Usage, from a snapshot of HEAD:
#   OUT=/tmp/out COMMIT=$(git rev-parse HEAD) scripts/device_run.sh
# GPU_FILTER (gtest filter of the GPU tests) and BENCH=0 (skip the benchmark) adjust a run.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:?set OUT to the folder the results go to}
commit=${COMMIT:-unknown}
build=$root/build-device
mkdir -p "$out"
start=$(date +%s)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DRSSM_CUDA_GENCODE="-gencode=arch=compute_90a,code=sm_90a" > "$out/build.log" 2>&1 &&
  cmake --build "$build" -j "$(nproc)" --target replayssm_tests replayssm_cli replayssm_bench \
    >> "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
"$build/tests/replayssm_tests" --gtest_filter="${GPU_FILTER:-*Cuda*:*CUDA*}" \
  > "$out/gpu-tests-$commit.log" 2>&1
echo "GPU tests rc $? ($(grep -cE '^\[       OK' "$out/gpu-tests-$commit.log") passed): $(( $(date +%s) - start )) s"
grep -E "^\[  (FAILED|PASSED)|tests ran" "$out/gpu-tests-$commit.log" | head -20
if [ "${BENCH:-1}" = 1 ]; then
  "$build/bench/replayssm_bench" kernels --family all --commit "$commit" \
    --out "$out/kernels-all-$commit.json" > "$out/kernels-all-$commit.txt" 2>&1
  echo "bench rc $?: $(( $(date +%s) - start )) s"
  python3 "$root/bench/plot_kernels.py" "$out/kernels-all-$commit.json" \
    "$out/kernels-all-$commit.png" > /dev/null 2>&1 || echo "plot failed"
fi
