#include "threads.h"

#include <omp.h>

#include <cstdio>

#include "cli_checks.h"

// OpenBLAS's own thread count; absent (null) when the BLAS linked is not OpenBLAS.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace replayssm::cli {
namespace {
int g_threads = 0;  // 0: not given
}  // namespace

void add_threads_option(CLI::App& sub) {
  sub.add_option("--threads", g_threads,
                 "CPU threads (OpenMP and OpenBLAS; default: one per core). Fewer than the cores "
                 "decode faster where other work holds some of them")
      ->check(in_range(1, kMaxThreads))
      ->default_str("cores");
}

void apply_threads() {
  if (g_threads <= 0) return;
  if (g_threads > omp_get_num_procs())  // allowed, but slower
    std::fprintf(stderr, "replayssm: note: --threads %d is more than the %d CPUs: steps wait "
                         "for descheduled threads\n", g_threads, omp_get_num_procs());
  omp_set_num_threads(g_threads);
  if (openblas_set_num_threads) openblas_set_num_threads(g_threads);
}

}  // namespace replayssm::cli
