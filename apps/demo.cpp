// `replayssm demo`: the main job until the engine lands. Runs a stack of Mamba-2 layers and a stack
// of Gated DeltaNet layers on random inputs, decoding every step twice — conventional (state read,
// updated and written each step) and ReplaySSM (checkpoint + ring, one state write per L steps) —
// and reports whether the outputs agree and how long each took.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "bench_common.h"
#include "cli_checks.h"
#include "cli_words.h"
#include "commands.h"
#include "cuda/device.h"
#include "demo_stacks.h"
#include "progress.h"
#include "replayssm/errors.h"
#include "threads.h"

namespace replayssm::cli {
namespace {

// fp32 replay and conventional decoding differ only by rounding order; 1e-4 relative to the
// output's magnitude is ~1000x float32 epsilon, ample for a few layers and thousands of steps,
// and far below any real divergence (a wrong record or a missed flush gives O(1) errors).
constexpr double kAgreeTol = 1e-4;

struct Report {
  double conv_s = 0, replay_s = 0, max_rel_err = 0;
  long flushes = 0;
};

template <class Stack>
Report run_stack(Stack& stack, const DemoOptions& o, const char* label) {
  Report r;
  Progress bar(label, o.steps);
  for (int step = 0; step < o.steps; ++step) {
    stack.draw_inputs();
    auto t0 = std::chrono::steady_clock::now();
    stack.step_conventional();
    auto t1 = std::chrono::steady_clock::now();
    r.flushes += stack.step_replay();
    auto t2 = std::chrono::steady_clock::now();
    r.conv_s += std::chrono::duration<double>(t1 - t0).count();
    r.replay_s += std::chrono::duration<double>(t2 - t1).count();
    r.max_rel_err = std::max(r.max_rel_err, stack.output_rel_err());
    bar.tick();
  }
  return r;
}

void print_report(const char* family, const std::string& shape, const DemoOptions& o,
                  const Report& r) {
  const double tokens = static_cast<double>(o.batch) * o.steps;
  fmt::print("{:<7} {}\n", family, shape);
  const std::string replay = fmt::format("replay L={}", o.L);  // L up to 4 digits: one column
  fmt::print("        {:<14}{:8.1f} ms  ({:9.0f} tokens/s)\n", "conventional", 1e3 * r.conv_s,
             tokens / r.conv_s);
  fmt::print("        {:<14}{:8.1f} ms  ({:9.0f} tokens/s), {} flush{}\n", replay, 1e3 * r.replay_s,
             tokens / r.replay_s, r.flushes, r.flushes == 1 ? "" : "es");
  fmt::print("        max relative difference of the last layer's outputs: {:.2e} -> {}\n",
             r.max_rel_err, r.max_rel_err < kAgreeTol ? "outputs agree" : "OUTPUTS DIFFER");
}

/// Host bytes the three stacks hold at once, roughly: per sequence and layer the conventional
/// state, the checkpoint and L ring records (demo_stacks.h), float32.
double demo_bytes(const DemoOptions& o) {
  auto family = [&](double state, double record) { return 2.0 * state + o.L * record; };
  const mamba2::Dims m = mamba2_dims(o);
  double floats = family(double(m.nheads) * m.headdim * m.d_state,  // record: x, dt, B
                         double(m.nheads) * m.headdim + m.nheads + m.ngroups * m.d_state);
  for (const bool kda : {false, true}) {
    const gdn::Dims g = gdn_dims(o, kda);  // record: u, k^, gate (a vector over K for KDA)
    floats += family(double(g.num_v_heads) * g.head_v_dim * g.head_k_dim,
                     double(g.num_v_heads) * g.head_v_dim + g.num_k_heads * g.head_k_dim +
                         g.num_v_heads * (kda ? g.head_k_dim : 1));
  }
  return 4.0 * o.batch * o.layers * floats;
}

int run_demo(const DemoOptions& o) {
  const bool have_gpu = cuda::device_count() > 0;
  if (o.backend == "cuda")
    throw UnsupportedError("demo: the CUDA path of the demo is not built yet; use --device cpu");
  const double need = demo_bytes(o), have = host_available_bytes(), gib = 1024.0 * 1024 * 1024;
  check<ConfigError>(have <= 0 || need < 0.9 * have, "demo: --batch ", o.batch, " x --layers ",
                     o.layers, " at --shape ", o.shape, " would need ~",
                     fmt::format("{:.1f}", need / gib), " GiB, this machine has ",
                     fmt::format("{:.1f}", have / gib),
                     " GiB available: use a smaller --batch or --layers");
  fmt::print(
      "replayssm demo: backend cpu{}, batch {}, {} layer{} per stack, {} step{}, L = {}, seed {}\n",
      have_gpu ? " (a CUDA device is present; the CUDA demo path is not built yet)" : "", o.batch,
      o.layers, cli::plural_s(o.layers), o.steps, cli::plural_s(o.steps), o.L, o.seed);
  Mamba2Stack m(o);
  const Report rm = run_stack(m, o, "mamba2");
  print_report("mamba2", m.describe(), o, rm);
  GdnStack g(o, /*kda=*/false);
  const Report rg = run_stack(g, o, "gdn");
  print_report("gdn", g.describe(), o, rg);
  GdnStack k(o, /*kda=*/true);
  const Report rk = run_stack(k, o, "kda");
  print_report("kda", k.describe(), o, rk);
  const bool ok = rm.max_rel_err < kAgreeTol && rg.max_rel_err < kAgreeTol && rk.max_rel_err < kAgreeTol;
  fmt::print("{}\n", ok ? "conventional and ReplaySSM decoding agree"
                        : "conventional and ReplaySSM decoding DISAGREE");
  return ok ? 0 : 1;
}

}  // namespace

void add_demo(CLI::App& app, Action& action) {
  static DemoOptions o;
  auto* sub = app.add_subcommand(
      "demo", "decode Mamba-2, GDN and KDA layer stacks on random inputs, conventional vs ReplaySSM");
  sub->option_defaults()->always_capture_default();  // --help shows every default
  sub->add_option("--batch", o.batch, "sequences decoded together")->check(in_range(1, 4096));
  sub->add_option("--layers", o.layers, "SSM layers per stack")->check(in_range(1, 64));
  sub->add_option("--steps", o.steps, "decode steps")->check(in_range(1, 1000000));
  sub->add_option("-L,--ring,--ring-length", o.L, "ReplaySSM ring length L (tokens per flush)")
      ->check(in_range(1, 1024));
  sub->add_option("--seed", o.seed, "random seed")->check(seed_validator());
  sub->add_option("--shape", o.shape, "layer sizes: small, or real (Nemotron-3-Nano-4B, Qwen3.5-4B, Kimi-Linear)")
      ->check(CLI::IsMember({"small", "real"}));
  // --device as every other command names it; --backend kept for existing scripts.
  sub->add_option("--device,--backend", o.backend, "cpu, cuda or auto (the demo runs on the CPU)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  add_threads_option(*sub);
  sub->callback([&action] { action = [] { return run_demo(o); }; });
}

}  // namespace replayssm::cli
