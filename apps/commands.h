// Each subcommand of the replayssm CLI registers itself on the app; main() runs the chosen one.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace replayssm::cli {

/// The action of the parsed subcommand; returns the process exit code.
using Action = std::function<int()>;

void add_demo(CLI::App& app, Action& action);
void add_info(CLI::App& app, Action& action);
/// generate: decode prompts with a checkpoint (engine/).
void add_generate(CLI::App& app, Action& action);
/// eval: teacher-forced KL, top-1 agreement and bits per byte of state modes over a text.
void add_eval(CLI::App& app, Action& action);
/// bench e2e: decode-step throughput of whole models; bench spec (registered by add_bench):
/// speculative decoding throughput, standard vs snapshot vs ReplaySSM.
void add_bench(CLI::App& app, Action& action);
void add_bench_spec(CLI::App& bench, Action& action);

}  // namespace replayssm::cli
