#include "runtime_env.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "cli_checks.h"
#include "cli_words.h"
#include "threads.h"

namespace replayssm::cli {
namespace {

/// The OpenBLAS core for this CPU's flags, or "" when no hint is needed or known.
std::string openblas_core() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    const auto has = [&](const char* flag) {
      return (" " + line + " ").find(std::string(" ") + flag + " ") != std::string::npos;
    };
    if (has("avx512f")) return "SkylakeX";
    if (has("avx2")) return "Haswell";
    return "";
  }
  return "";
}

/// The value given to --threads (--threads N or --threads=N), or "" when none is; CLI11 checks
/// it again after the restart (a bad value gets its message there).
std::string threads_arg(char** argv) {
  for (int i = 1; argv[i]; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;                     // positional arguments follow
    if (free_text_value(argv, i)) continue;  // --commit --threads=1 is a commit label
    if (a == "--threads" && argv[i + 1]) return argv[i + 1];
    if (a.rfind("--threads=", 0) == 0) return a.substr(10);
  }
  return "";
}

}  // namespace

void apply_runtime_env(char** argv) {
  if (std::getenv("RSSM_RUNTIME_ENV")) return;
  ::setenv("RSSM_RUNTIME_ENV", "1", 1);
  bool changed = false;
  if (!std::getenv("OMP_WAIT_POLICY")) {
    ::setenv("OMP_WAIT_POLICY", "passive", 1);
    changed = true;
  }
  if (!std::getenv("OPENBLAS_CORETYPE")) {
    const std::string core = openblas_core();
    if (!core.empty()) {
      ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
      changed = true;
    }
  }
  // --threads N: OpenBLAS sizes its pool from the environment when the library loads (a BLAS
  // that is not OpenBLAS ignores it); OpenMP is set again through the API after parsing.
  const std::string t = threads_arg(argv);
  int threads = 0;
  if (parse_decimal(t, threads) && threads >= 1 && threads <= kMaxThreads) {  // else CLI11 says
    ::setenv("OPENBLAS_NUM_THREADS", t.c_str(), 1);
    ::setenv("OMP_NUM_THREADS", t.c_str(), 1);
    changed = true;
  }
  if (changed) ::execv("/proc/self/exe", argv);  // returns only on failure: carry on as we are
}

}  // namespace replayssm::cli
