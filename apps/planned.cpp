// Subcommands whose implementation has not landed yet. They exist so --help shows the whole tool,
// and they refuse to run rather than print anything that looks like a result.
#include <cstdio>

#include "commands.h"

namespace replayssm::cli {
namespace {

void add_one(CLI::App& app, Action& action, const char* name, const char* what) {
  auto* sub = app.add_subcommand(name, std::string(what) + " (not built yet)");
  sub->allow_extras();
  sub->callback([&action, name] {
    action = [name] {
      std::fprintf(stderr, "replayssm %s: not built yet\n", name);
      return 2;
    };
  });
}

}  // namespace

void add_planned(CLI::App& app, Action& action) {
  add_one(app, action, "bench", "benchmark kernels, decode steps and speculative decoding");
}

}  // namespace replayssm::cli
