#!/usr/bin/env bash
# Builds bench/peers/flashinfer_mamba2.cu once per FlashInfer kernel configuration (its launchers
# read DIM, MAX_WINDOW, ... from file-scope constexprs, so each needs its own executable) for
# sm_90a, with the flags FlashInfer's JIT uses there (anchors-h200.md). No GPU is needed.
#
#   FLASHINFER_DIR=... CUTLASS_DIR=... bench/peers/build_flashinfer.sh OUT_DIR [CONFIG ...]
#
# FLASHINFER_DIR holds FlashInfer's include/flashinfer, CUTLASS_DIR CUTLASS's include/cute (the
# CuTe headers checkpointing_ssu needs). CONFIG is ssu-nano-4b, ssu-super-120b, ckpt7-super-120b,
# ckpt15-super-120b (the default: all four; ckptW = MAX_WINDOW W, ring L = W + 1) or ckpt7-nano-4b,
# ckpt15-nano-4b, which do not compile at FlashInfer fb28d72 (headdim 80: CuTe static asserts in
# checkpointing_ssu, monolith and split alike) and are built only when named. FLASHINFER_COMMIT
# names the FlashInfer commit recorded in the JSON (else git, when FLASHINFER_DIR is a checkout). Executables go to
# OUT_DIR/flashinfer_mamba2-CONFIG, compiler output to OUT_DIR/CONFIG.log; JOBS builds at a time
# [nproc]. Nothing of FlashInfer enters this repository: the one edit nvcc 13.0 needs (deviation
# 1: a (uint64_t) cast of state_stride_batch in a TMA-descriptor stride list of
# kernel_selective_state_update_stp.cuh, host code) goes to a temporary copy of its headers.
set -euo pipefail
usage="usage: FLASHINFER_DIR=... CUTLASS_DIR=... [FLASHINFER_COMMIT=...] $0 OUT_DIR [CONFIG ...]"
die() { echo "build_flashinfer.sh: error: $*" >&2; exit 2; }
case ${1:-} in -h|--help) echo "$usage"; exit 0 ;; "") die "$usage" ;; esac
out=$1
shift
[ -n "${FLASHINFER_DIR:-}" ] || die "set FLASHINFER_DIR to a FlashInfer checkout ($usage)"
[ -n "${CUTLASS_DIR:-}" ] || die "set CUTLASS_DIR to a CUTLASS checkout ($usage)"
[ -d "$FLASHINFER_DIR/include/flashinfer/mamba" ] || die "$FLASHINFER_DIR has no include/flashinfer/mamba"
[ -d "$CUTLASS_DIR/include/cute" ] || die "$CUTLASS_DIR has no include/cute"
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
src=$(cd "$(dirname "$0")" && pwd)/flashinfer_mamba2.cu
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(ssu-nano-4b ssu-super-120b ckpt7-super-120b ckpt15-super-120b)
for c in "${configs[@]}"; do
  [[ $c =~ ^(ssu|ckpt7|ckpt15)-(nano-4b|super-120b)$ ]] || die "unknown config '$c'"
done
# The commit: FLASHINFER_COMMIT when given, else git only when FLASHINFER_DIR is itself the top
# of a checkout (a folder inside another repository must not record that repository's HEAD).
commit=${FLASHINFER_COMMIT:-}
if [ -z "$commit" ] && [ "$(git -C "$FLASHINFER_DIR" rev-parse --show-toplevel 2>/dev/null)" = \
    "$(cd "$FLASHINFER_DIR" && pwd -P)" ]; then
  commit=$(git -C "$FLASHINFER_DIR" rev-parse --short HEAD)
fi
commit=${commit:-unknown}
mkdir -p -- "$out"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$FLASHINFER_DIR/include" "$tmp/"
stp=include/flashinfer/mamba/kernel_selective_state_update_stp.cuh
[ -f "$tmp/$stp" ] || die "$FLASHINFER_DIR/$stp not found (another FlashInfer layout?)"
sed -i 's/DSTATE \* DIM, params\.state_stride_batch}/DSTATE * DIM, (uint64_t)params.state_stride_batch}/' "$tmp/$stp"
cast=$(diff "$FLASHINFER_DIR/$stp" "$tmp/$stp" | grep -c '^>' || true)
[ "$cast" -gt 0 ] || die "deviation 1 matched nothing in $stp: check the header at this FlashInfer commit"
echo "FlashInfer $commit; deviation 1: $cast line(s) of $stp cast"

flags=(-std=c++17 -O3 -use_fast_math --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a
       -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -DFLASHINFER_ENABLE_BF16 -DFLASHINFER_ENABLE_F16
       -DFLASHINFER_ENABLE_FP8_E4M3 -DFLASHINFER_ENABLE_FP8_E5M2 -DFLASHINFER_MAMBA_ENABLE_SM90
       -I"$tmp/include" -I"$CUTLASS_DIR/include" -DFI_COMMIT="\"$commit\"")
# FlashInfer encodes TMA descriptors through the driver API (cuTensorMapEncodeTiled): link the stub.
libs=(-L"$(dirname "$(dirname "$nvcc")")/lib64/stubs" -lcuda)

build() {  # one configuration; its status goes to a file (background jobs)
  local c=$1 defs t0=$SECONDS
  case $c in
    ssu-*) defs=(-DFI_KERNEL_SSU) ;;
    ckpt7-*) defs=(-DFI_KERNEL_CKPT -DFI_MAX_WINDOW=7) ;;
    ckpt15-*) defs=(-DFI_KERNEL_CKPT -DFI_MAX_WINDOW=15) ;;
    *) echo "unknown config $c"; echo 1 > "$tmp/$c.rc"; return ;;
  esac
  case $c in
    *-nano-4b) defs+=(-DFI_SHAPE_NANO) ;;
    *-super-120b) defs+=(-DFI_SHAPE_SUPER) ;;
    *) echo "unknown shape in $c"; echo 1 > "$tmp/$c.rc"; return ;;
  esac
  if "$nvcc" "${flags[@]}" "${defs[@]}" -o "$out/flashinfer_mamba2-$c" "$src" "${libs[@]}" \
      > "$out/$c.log" 2>&1; then
    echo "built $out/flashinfer_mamba2-$c in $((SECONDS - t0)) s"
    echo 0 > "$tmp/$c.rc"
  else
    echo "FAILED $c after $((SECONDS - t0)) s ($out/$c.log):"
    grep -m 8 'error' "$out/$c.log" | sed 's/^/    /'
    echo 1 > "$tmp/$c.rc"
  fi
}
for c in "${configs[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-$(nproc)}" ]; do wait -n || true; done
  build "$c" &
done
wait
status=0
for c in "${configs[@]}"; do [ "$(cat "$tmp/$c.rc")" = 0 ] || status=1; done
exit $status
