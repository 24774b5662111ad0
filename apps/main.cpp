// replayssm: the command-line tool. Errors print one line and exit non-zero.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "cli_words.h"
#include "commands.h"
#include "runtime_env.h"
#include "threads.h"
#include "replayssm/errors.h"
#include "version.h"


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
  const std::string errs[] = {
      replayssm::cli::unknown_command(
          app, argc, argv, "replayssm",
          {{"kernels", "the kernel benchmarks are build/bench/replayssm_bench kernels|verify|floors"},
           {"verify", "the kernel benchmarks are build/bench/replayssm_bench kernels|verify|floors"},
           {"floors", "the kernel benchmarks are build/bench/replayssm_bench kernels|verify|floors"}}),
      replayssm::cli::empty_list_element(
          argc, argv, {"--batch", "-L", "--ring", "--state", "-T", "--prompt-ids", "--buckets"})};
  for (const std::string& err : errs)
    if (!err.empty()) {
      std::fprintf(stderr, "replayssm: error: %s (see --help)\n", err.c_str());
      return 2;
    }
  try {
    app.parse(argc, argv);
    replayssm::cli::reject_repeated_lists(app, argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "replayssm: error: %s (see --help)\n",
                 replayssm::cli::plain_parse_error(e.what()).c_str());
    return 2;
  }
  try {
    replayssm::cli::apply_threads();
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
