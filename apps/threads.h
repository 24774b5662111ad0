// --threads: the CPU backend's thread count (OpenMP team and OpenBLAS), one option shared by the
// commands that decode on the CPU.
#pragma once
#include <CLI/CLI.hpp>

namespace replayssm::cli {

/// The largest --threads value.
constexpr int kMaxThreads = 1024;

/// Adds --threads N (1..1024; default: one per core, as OpenMP and OpenBLAS pick) to `sub`.
/// Fewer threads than cores pay where other work holds cores: a fork-join step waits for its
/// slowest thread, and a descheduled one stalls every step (a 2-core VM with one core busy:
/// the bundled model at batch 1 ran 83-312 tokens/s with 2 threads, ~700 with 1).
void add_threads_option(CLI::App& sub);

/// Applies the parsed --threads (if given) before a command runs: omp_set_num_threads, and
/// openblas_set_num_threads where the BLAS is OpenBLAS (another BLAS keeps its own setting).
void apply_threads();

}  // namespace replayssm::cli
