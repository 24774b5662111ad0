// replayssm_drift: the drift study of issue 6 (point 3). For Mamba-2, GDN and KDA heads at real
// shapes it runs every state mode (precision.h) for --steps decode steps on one token stream and
// records, at log-spaced steps (multiples of L, so every split mode has just flushed), the
// relative error of the outputs (RMS over the steps since the previous record) and of the state
// (Frobenius) against the fp32 recurrence (the conventional float32 step). Runs on the CPU
// backend; --heads and --steps scale it up. Writes JSON (DESIGN.md §4: bench "precision", one row
// per family and mode with "state" named recurrence/read and "drift" rows of "steps" and
// "rel_error") and prints a summary. scripts/plot_drift.py draws the plot.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "drift_family.h"
#include "progress.h"
#include "replayssm/errors.h"
#include "replayssm/precision.h"

namespace {

using namespace replayssm;
using replayssm::drift::Family;

std::string run_text(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    std::array<char, 256> buf{};
    while (fgets(buf.data(), buf.size(), p)) out += buf.data();
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

/// Log-spaced record steps, `per_decade` per decade, rounded up to multiples of L, up to steps.
std::vector<long> record_steps(long steps, int L, int per_decade) {
  std::set<long> s;
  for (int i = 0;; ++i) {
    const double v = std::pow(10.0, static_cast<double>(i) / per_decade);
    long r = (static_cast<long>(std::ceil(v)) + L - 1) / L * L;
    if (r > steps) break;
    s.insert(r);
  }
  if (steps >= L) s.insert(steps / L * L);
  return {s.begin(), s.end()};
}

/// Heads of the real model's layer, for the state memory per layer.
int64_t model_heads(Family f) { return f == Family::kMamba2 ? 96 : 32; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"replayssm_drift: error of every state mode vs the fp32 recurrence over many steps"};
  std::string family = "all", modes_arg = "all", out;
  long steps = 10000;
  int64_t heads = 2;
  int L = 16, per_decade = 4;
  uint64_t seed = 1;
  app.add_option("--family", family, "mamba2, gdn, kda or all")->check(CLI::IsMember({"mamba2", "gdn", "kda", "all"}));
  app.add_option("--steps", steps, "decode steps")->check(CLI::Range(1L, 100000000L));
  app.add_option("--heads", heads, "heads per family (the full layers: 96 Mamba-2, 32 GDN/KDA)")->check(CLI::Range(1, 4096));
  app.add_option("-L,--ring", L, "ring length L (steps per flush)")->check(CLI::Range(1, 1024));
  app.add_option("--modes", modes_arg, "comma-separated modes (precision.h names) or all");
  app.add_option("--points-per-decade", per_decade, "record steps per decade")->check(CLI::Range(1, 100));
  app.add_option("--seed", seed, "input seed");
  app.add_option("--out", out, "JSON output path (default: no file)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "replayssm_drift: error: %s (see --help)\n", e.what());
    return 2;
  }

  try {
    std::vector<StateMode> modes;
    if (modes_arg == "all") {
      modes = state_modes();
    } else {
      std::stringstream ss(modes_arg);
      for (std::string m; std::getline(ss, m, ',');) modes.push_back(parse_state_mode(m));
    }
    check<ConfigError>(!modes.empty(), "--modes: no mode given (names of precision.h, or all)");
    std::vector<Family> families;
    for (Family f : {Family::kMamba2, Family::kGdn, Family::kKda})
      if (family == "all" || family == drift::family_name(f)) families.push_back(f);
    const std::vector<long> marks = record_steps(steps, L, per_decade);

    const std::string src = RSSM_SOURCE_DIR;
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    const std::time_t now = std::time(nullptr);
    char date[32];
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    nlohmann::json doc = {
        {"bench", "precision"},
        {"study", "drift"},
        {"commit", run_text("git -C '" + src + "' rev-parse --short HEAD")},
        {"date", date},
        {"host", host},
        {"gpu", nullptr},
        {"device", "cpu"},
        {"steps", steps},
        {"L", L},
        {"heads", heads},
        {"seed", seed},
        {"baseline", "fp32 recurrence (conventional float32 step, same tokens)"},
        {"metrics",
         "rel_error: sqrt(sum ||y - y_fp32||^2 / sum ||y_fp32||^2) over the steps since the previous "
         "record; state_rel_error: ||S - S_fp32||_F / ||S_fp32||_F at the step (split modes: the "
         "checkpoint, just flushed)"},
        {"inputs", "bench/drift/drift_family.cpp: A in [1,16] log-uniform, dt0 in [1e-3,1e-1] log-uniform, "
                   "decays spread over (0,1), unit-norm keys, x/v/B/C/q/k ~ N(0,1), beta = sigmoid(N(0,1.5^2))"},
        {"rows", nlohmann::json::array()}};

    for (Family f : families) {
      auto run = drift::make_run(f, modes, heads, L, seed);
      std::vector<nlohmann::json> drift_rows(modes.size(), nlohmann::json::array());
      const auto t0 = std::chrono::steady_clock::now();
      {
        cli::Progress bar(std::string(drift::family_name(f)) + " " + std::to_string(modes.size()) + " modes", steps);
        size_t next = 0;
        for (long s = 1; s <= steps; ++s) {
          run->step();
          bar.tick();
          if (next < marks.size() && s == marks[next]) {
            const std::vector<double> ye = run->take_output_errors();
            for (size_t m = 0; m < modes.size(); ++m)
              drift_rows[m].push_back({{"steps", s}, {"rel_error", ye[m]}, {"state_rel_error", run->state_rel_error(m)}});
            ++next;
          }
        }
      }
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%s (%s, %lld heads, L %d): %ld steps in %.1f s\n", drift::family_name(f), run->shape().c_str(),
                  static_cast<long long>(heads), L, steps, secs);
      std::printf("  %-14s %14s %16s\n", "state", "rel_error", "state_rel_error");
      const int64_t rows = f == Family::kMamba2 ? 80 : 128, n = 128;
      for (size_t m = 0; m < modes.size(); ++m) {
        if (!drift_rows[m].empty()) {  // (no row when --steps ends before the first record step)
          const nlohmann::json& last = drift_rows[m].back();
          std::printf("  %-14s %14.3e %16.3e\n", modes[m].name().c_str(),
                      last["rel_error"].get<double>(), last["state_rel_error"].get<double>());
        }
        const StateBytes b = state_bytes(modes[m], model_heads(f), rows, n);
        doc["rows"].push_back({{"family", drift::family_name(f)},
                               {"shape", run->shape()},
                               {"heads", heads},
                               {"state", modes[m].name()},
                               {"variant", modes[m].shared ? "conventional" : "replay"},
                               {"L", modes[m].shared ? 1 : L},
                               {"state_bytes_per_layer", b.total()},
                               {"state_bytes_layer_heads", model_heads(f)},
                               {"seconds", secs},
                               {"drift", drift_rows[m]}});
      }
    }
    if (!out.empty()) {
      std::ofstream f(out);
      f << doc.dump(1) << "\n";
      f.close();
      if (!f) throw replayssm::Error("cannot write " + out);
      std::printf("wrote %s\n", out.c_str());
    }
  } catch (const replayssm::Error& e) {
    std::fprintf(stderr, "replayssm_drift: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
