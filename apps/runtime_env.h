// Process-start settings of the CPU backend's libraries, applied by the CLI itself.
#pragma once

namespace replayssm::cli {

/// OpenBLAS chooses its kernels and libgomp its wait policy when the process starts, from the
/// environment. Where unset: OMP_WAIT_POLICY=passive (idle OpenMP workers spinning between the
/// small parallel regions of a decode step starve OpenBLAS: 10x slower on a loaded 2-core VM) and
/// OPENBLAS_CORETYPE from the CPU flags (OpenBLAS reads some virtual CPUs as a 2004 Prescott and
/// runs SSE3 kernels: 4x slower); then the process restarts itself once with them
/// (RSSM_RUNTIME_ENV marks the restart; set it to anything to opt out). scripts/env.sh does the
/// same for the test binaries. A --threads N on the command line also sets OPENBLAS_NUM_THREADS
/// and OMP_NUM_THREADS for the restart: OpenBLAS sizes its pool when it loads, and a BLAS linked
/// as libblas.so.3 has no openblas_set_num_threads to call later (threads.h).
void apply_runtime_env(char** argv);

}  // namespace replayssm::cli
