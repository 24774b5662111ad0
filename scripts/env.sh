# Sourced by the README commands: runtime settings for the CPU backend (each only when unset).
# OpenBLAS identifies some virtual CPUs (model name "Intel(R) Xeon(R) Processor") as a 2004 Prescott
# and runs its SSE3 kernels: the bundled model decodes ~4x slower (measured 70 vs 272 tokens/s).
# Name the core from the CPU flags instead.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -r /proc/cpuinfo ]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi
# Idle OpenMP workers spinning between the many small parallel regions of a decode step steal the
# cores OpenBLAS and the main thread need (10x slower on a loaded 2-core machine): let them sleep.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
