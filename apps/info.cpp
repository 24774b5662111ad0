// `replayssm info`: version, compiled backends and the CUDA device, one per line.
#include <fmt/core.h>

#include "commands.h"
#include "cuda/device.h"
#include "version.h"

namespace replayssm::cli {

void add_info(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("info", "print the version, compiled backends and CUDA device");
  sub->callback([&action] {
    action = [] {
      fmt::print("replayssm {}\n", kVersion);
#ifdef RSSM_WITH_CUDA
      fmt::print("backends: cpu, cuda (compiled)\n");
#else
      fmt::print("backends: cpu\n");
#endif
      fmt::print("cuda device: {}\n", cuda::device_summary());
      return 0;
    };
  });
}

}  // namespace replayssm::cli
