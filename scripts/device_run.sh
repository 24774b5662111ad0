#!/usr/bin/env bash
# One call on the GPU machine (see /work/.library/device): build for the H200 (sm_90a) — or take
# prebuilt binaries from $PREBUILT (replayssm_tests, replayssm, replayssm_bench, optionally .xz/.gz),
# built here with the same -gencode, since building on the device costs its time — run the GPU
# tests, the kernel benchmark and the bundled models on CUDA, and write logs and results under
# $OUT (at most 8 files come back). Usage:
#   OUT=/tmp/out COMMIT=$(git rev-parse --short HEAD) [PREBUILT=.devbin] scripts/device_run.sh
# GPU_FILTER (gtest filter of the GPU tests), GENERATE=0 (skip the bundled models), BENCH=0
# (skip the benchmark), BENCH_ARGS (benchmark arguments, default --family all), VERIFY=1 (the
# speculative verify benchmark, arguments VERIFY_ARGS), E2E=1 (`replayssm bench e2e` with random
# weights for each of E2E_ARCHS, default "nemotron-3-nano-4b qwen3.5-4b", arguments E2E_ARGS) and
# GDN_PLANS
# (';'-separated RSSM_GDN_REPLAY_PLAN values, each benchmarked at batch 64 and 256 without the L
# sweep: a tuning run), FLASHINFER (a folder of bench/peers/build_flashinfer.sh executables, run
# after our kernel benchmark in the same call), SPEC=1 (`replayssm bench spec` with random weights for each of E2E_ARCHS,
# arguments SPEC_ARGS, default -T 2,4,6,8) and SPEC_DRAFTERS=1 (`bench spec --drafter` on the
# bundled models with n-gram drafts and models/nemotron-h-draft, prompts from PROMPTS, default
# tests/data/eval_text.txt) adjust a run. TAR=1 packs everything under $OUT into one
# results-$COMMIT.tar.gz (only 8 files come back from a call). The benchmarks' tables (stdout) go to
# .txt files, their progress and per-row lines (stderr) to .log files beside them.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:?set OUT to the folder the results go to}
commit=${COMMIT:-unknown}
mkdir -p "$out"
start=$(date +%s)
if [ -n "${PREBUILT:-}" ]; then
  bin=$root/build-device-bin
  mkdir -p "$bin"
  for f in replayssm_tests replayssm replayssm_bench; do
    if [ -f "$PREBUILT/$f.xz" ]; then xz -dc "$PREBUILT/$f.xz" > "$bin/$f"
    elif [ -f "$PREBUILT/$f.gz" ]; then gunzip -c "$PREBUILT/$f.gz" > "$bin/$f"
    elif [ -f "$PREBUILT/$f" ]; then cp "$PREBUILT/$f" "$bin/$f"
    else continue; fi
    chmod +x "$bin/$f"
  done
  tests=$bin/replayssm_tests cli=$bin/replayssm bench=$bin/replayssm_bench
  # The tests find tests/fixtures through the source path compiled into them (RSSM_SOURCE_DIR,
  # the build machine's checkout: SRC_DIR, default /work/main).
  src=${SRC_DIR:-/work/main}
  if [ "$src" != "$root" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"; fi
else
  build=$root/build-device
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DRSSM_CUDA_GENCODE="-gencode=arch=compute_90a,code=sm_90a" > "$out/build.log" 2>&1 &&
    cmake --build "$build" -j "$(nproc)" --target replayssm_tests replayssm_cli replayssm_bench \
      >> "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
  tests=$build/tests/replayssm_tests cli=$build/apps/replayssm bench=$build/bench/replayssm_bench
fi
echo "binaries ready: $(( $(date +%s) - start )) s"
# The CPU side of the tests (the CPU engine) needs the passive OpenMP wait policy on a many-core
# machine, as the CLI and scripts/test.sh set it.
source "$root/scripts/env.sh"
"$tests" --gtest_filter="${GPU_FILTER:-*Cuda*:*CUDA*}" > "$out/gpu-tests-$commit.log" 2>&1
echo "GPU tests rc $? ($(grep -cE '^\[       OK' "$out/gpu-tests-$commit.log") passed): $(( $(date +%s) - start )) s"
grep -E "^\[  (FAILED|PASSED)|tests ran" "$out/gpu-tests-$commit.log" | head -20
if [ "${GENERATE:-1}" = 1 ]; then {
  for m in nemotron-h-tiny qwen3-next-tiny; do
    "$cli" generate --model "$root/models/$m" --prompt "It was a dark and stormy night; the rain fell in torrents, and" \
      -n 300 --compare --device cuda 2>&1
    for i in $(seq 64); do echo "Chapter $i. It was"; done > /tmp/prompts.txt
    "$cli" generate --model "$root/models/$m" --prompts /tmp/prompts.txt --batch 64 -n 256 -q \
      --compare --device cuda 2>&1
  done
} > "$out/generate-cuda-$commit.txt"
echo "generate rc $?: $(( $(date +%s) - start )) s"
fi
if [ "${BENCH:-1}" = 1 ]; then
  # shellcheck disable=SC2086  # BENCH_ARGS is a list of arguments
  "$bench" kernels ${BENCH_ARGS:---family all} --commit "$commit" \
    --out "$out/kernels-all-$commit.json" > "$out/kernels-all-$commit.txt" 2> "$out/kernels-all-$commit.log"
  echo "bench rc $?: $(( $(date +%s) - start )) s"
  python3 "$root/bench/plot_kernels.py" "$out/kernels-all-$commit.json" \
    "$out/kernels-all-$commit.png" > /dev/null 2>&1 || echo "plot failed"
fi
if [ -n "${FLASHINFER:-}" ]; then
  # FlashInfer's Mamba-2 kernels in the same call (bench/peers/build_flashinfer.sh built them here
  # into the folder FLASHINFER names, carried to the device): each executable at its defaults.
  for exe in "$FLASHINFER"/flashinfer_mamba2-*; do
    [ -x "$exe" ] || continue
    config=${exe##*/flashinfer_mamba2-}
    "$exe" --shape "${config#*-}" --commit "$commit" --out "$out/peer-flashinfer-$config-$commit.json" \
      > "$out/peer-flashinfer-$config-$commit.txt" 2>&1
    echo "flashinfer $config rc $?: $(( $(date +%s) - start )) s"
  done
fi
if [ "${VERIFY:-0}" = 1 ]; then
  # shellcheck disable=SC2086  # VERIFY_ARGS is a list of arguments
  "$bench" verify ${VERIFY_ARGS:-} --commit "$commit" --out "$out/verify-$commit.json" \
    > "$out/verify-$commit.txt" 2> "$out/verify-$commit.log"
  echo "verify bench rc $?: $(( $(date +%s) - start )) s"
  python3 "$root/bench/plot_verify.py" "$out/verify-$commit.json" "$out/verify-$commit.png" \
    > /dev/null 2>&1 || echo "verify plot failed"
fi
if [ "${E2E:-0}" = 1 ]; then
  for arch in ${E2E_ARCHS:-nemotron-3-nano-4b qwen3.5-4b}; do
    # shellcheck disable=SC2086  # E2E_ARGS is a list of arguments
    "$cli" bench e2e --arch "$arch" --random-weights --device cuda ${E2E_ARGS:-} --commit "$commit" \
      --json "$out/e2e-$arch-$commit.json" > "$out/e2e-$arch-$commit.txt" 2> "$out/e2e-$arch-$commit.log"
    echo "bench e2e $arch rc $?: $(( $(date +%s) - start )) s"
    tail -12 "$out/e2e-$arch-$commit.txt"
  done
  python3 "$root/bench/plot_e2e.py" "$out"/e2e-*-"$commit".json "$out/e2e-$commit.png" \
    > /dev/null 2>&1 || echo "e2e plot failed"
fi
if [ "${SPEC:-0}" = 1 ]; then
  for arch in ${E2E_ARCHS:-nemotron-3-nano-4b qwen3.5-4b}; do
    # shellcheck disable=SC2086  # SPEC_ARGS is a list of arguments
    "$cli" bench spec --arch "$arch" --random-weights --device cuda ${SPEC_ARGS:--T 2,4,6,8} \
      --commit "$commit" --json "$out/spec-cuda-$arch-$commit.json" \
      > "$out/spec-cuda-$arch-$commit.txt" 2> "$out/spec-cuda-$arch-$commit.log"
    echo "bench spec $arch rc $?: $(( $(date +%s) - start )) s"
    python3 "$root/bench/plot_spec.py" "$out/spec-cuda-$arch-$commit.json" \
      "$out/spec-cuda-$arch-$commit.png" > /dev/null 2>&1 || echo "spec plot failed"
  done
fi
if [ "${SPEC_DRAFTERS:-0}" = 1 ]; then
  for m in nemotron-h-tiny qwen3-next-tiny; do
    for d in ngram "model:$root/models/nemotron-h-draft"; do
      tag=$m-$(basename "${d#model:}")
      "$cli" bench spec --model "$root/models/$m" --drafter "$d" \
        --prompts "${PROMPTS:-$root/tests/data/eval_text.txt}" --batch 1,8,64 -T 2,4 \
        --device cuda --commit "$commit" --json "$out/spec-drafter-$tag-$commit.json" \
        > "$out/spec-drafter-$tag-$commit.txt" 2>&1
      echo "bench spec --drafter $tag rc $?: $(( $(date +%s) - start )) s"
    done
  done
fi
if [ -n "${GDN_PLANS:-}" ]; then
  IFS=';' read -ra plans <<< "$GDN_PLANS"
  for pl in "${plans[@]}"; do
    echo "== RSSM_GDN_REPLAY_PLAN=$pl"
    RSSM_GDN_REPLAY_PLAN=$pl "$bench" kernels --family gdn --batch 64,256 --no-sweep \
      --commit "$commit" 2>&1 | grep -E "batch (64|256) L 16"
    RSSM_GDN_REPLAY_PLAN=$pl "$bench" kernels --family kda --batch 64,256 --no-sweep \
      --commit "$commit" 2>&1 | grep -E "batch (64|256) L 16"
  done > "$out/gdn-plans-$commit.txt"
  echo "plan sweep: $(( $(date +%s) - start )) s"
fi
if [ "${TAR:-0}" = 1 ]; then
  (cd "$out" && tar -czf "results-$commit.tar.gz" --exclude "results-$commit.tar.gz" . &&
    find . -type f ! -name "results-$commit.tar.gz" -delete)
  echo "packed $out/results-$commit.tar.gz"
fi
