// replayssm: the command-line tool. Errors print one line and exit non-zero.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "commands.h"
#include "runtime_env.h"
#include "replayssm/errors.h"
#include "version.h"

namespace {

/// CLI11 reports a word that names no subcommand only as "A subcommand is required": the first
/// words that are not options must name a subcommand at each level. Returns "" or the error.
std::string unknown_command(CLI::App& app, int argc, char** argv) {
  CLI::App* cur = &app;
  std::string path = "replayssm";
  for (int i = 1; i < argc; ++i) {
    const std::string w = argv[i];
    const auto subs = cur->get_subcommands([](CLI::App*) { return true; });
    std::string names;
    for (const CLI::App* s : subs) names += (names.empty() ? "" : ", ") + s->get_name();
    // Before the command, the tool itself takes only --help and --version.
    if (cur == &app && !w.empty() && w[0] == '-' && w != "-h" && w != "--help" &&
        w != "--version")
      return "unknown option '" + w + "' of replayssm, expected a command first (" + names +
             ") or --help / --version";
    if (w.empty() || w[0] == '-' || subs.empty()) return "";  // options and leaf arguments
    CLI::App* sub = nullptr;
    for (CLI::App* s : subs)
      if (s->check_name(w)) sub = s;
    if (sub == nullptr) {
      std::string msg = "unknown command '" + w + "' of " + path + ", expected one of " + names;
      if (w == "kernels" || w == "verify")
        msg += " (the kernel benchmarks are build/bench/replayssm_bench kernels|verify)";
      return msg;
    }
    cur = sub;
    path += " " + w;
  }
  return "";
}

/// A list option (comma-separated) with an empty element: CLI11 would drop it silently.
std::string empty_list_element(int argc, char** argv) {
  static const char* const kLists[] = {"--batch", "-L", "--ring", "--state", "-T"};
  for (int i = 1; i + 1 < argc; ++i)
    for (const char* name : kLists) {
      const std::string v = argv[i + 1];
      if (argv[i] != std::string(name)) continue;
      if (v.empty() || v.front() == ',' || v.back() == ',' || v.find(",,") != std::string::npos)
        return std::string(name) + ": empty element in '" + v + "'";
    }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  replayssm::cli::apply_runtime_env(argv);
  CLI::App app{"replayssm: ReplaySSM decoding for hybrid SSM language models "
               "(Mamba-2, Gated DeltaNet, KDA)"};
  app.set_version_flag("--version", replayssm::kVersion);
  app.require_subcommand(1);
  replayssm::cli::Action action;
  replayssm::cli::add_demo(app, action);
  replayssm::cli::add_info(app, action);
  replayssm::cli::add_generate(app, action);
  replayssm::cli::add_eval(app, action);
  replayssm::cli::add_bench(app, action);
  for (const std::string& err : {unknown_command(app, argc, argv), empty_list_element(argc, argv)})
    if (!err.empty()) {
      std::fprintf(stderr, "replayssm: error: %s (see --help)\n", err.c_str());
      return 2;
    }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "replayssm: error: %s (see --help)\n", e.what());
    return 2;
  }
  try {
    const int rc = action();
    // Output that could not be written (a full disk, a closed pipe) is an error, not a success.
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
      std::fprintf(stderr, "replayssm: error: writing the output failed\n");
      return 1;
    }
    return rc;
  } catch (const replayssm::Error& e) {
    std::fprintf(stderr, "replayssm: error: %s\n", e.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "replayssm: error: out of host memory (fewer or shorter sequences, a "
                         "smaller model, or a GPU, may fit)\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "replayssm: internal error: %s\n", e.what());
  }
  return 1;
}
