// `replayssm bench e2e`: decode-step throughput of a whole model, conventional vs ReplaySSM
// decoding (issue 9). The model has the exact layer structure and sizes of a published checkpoint
// (--arch, engine/include/replayssm/engine/published.h) or of a checkpoint directory (--model),
// with random weights (timing does not depend on the values) or the checkpoint's own. For every
// variant (conventional; replay at each --L and --state) and batch size, the rows are moved to
// --context positions, their ring phases staggered, and whole flush cycles of CUDA-graph decode
// steps are timed (Model::time_steps); see e2e_report.cpp "method".
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "cli_checks.h"
#include "cli_words.h"
#include "commands.h"
#include "cuda/device.h"
#include "e2e_report.h"
#include "progress.h"
#include "replayssm/engine/checkpoint.h"
#include "replayssm/engine/config.h"
#include "replayssm/engine/memory.h"
#include "replayssm/engine/model.h"
#include "replayssm/engine/published.h"
#include "replayssm/errors.h"
#include "run_info.h"
#include "threads.h"

namespace replayssm::cli {
namespace {

/// Whole step() and step_greedy() calls timed per point (E2eRow::served_*_ms).
constexpr int kServedSteps = 4;

struct E2eArgs {
  std::string arch, model, device = "auto", json_out, commit;
  bool random_weights = false;
  std::vector<int64_t> batches = {1, 8, 32, 64, 128, 256, 512};
  std::vector<int> ring_lengths = {16};
  std::vector<std::string> states = {"fp32"};
  int64_t context = 1024;
  int windows = 5, profile_steps = 3;
  uint64_t seed = 20261201;
};

/// One model configuration to time: conventional, or replay at ring length L in a state mode.
struct Variant {
  engine::SsmMode ssm;
  int L;
  std::string state;
  /// Steps per timed window: the smallest multiple of L that is >= 16, so a window holds whole
  /// flush cycles (conventional: 16).
  int window() const { return L * ((16 + L - 1) / L); }
  /// Positions a batch uses beyond --context: the stagger, the warm-up (+ its eager step), the
  /// timed windows and the profiled steps (two positions each).
  int64_t positions(int windows, int profile_steps) const {
    return int64_t{L} + 1 + int64_t{window()} * (windows + 1) + 2 * int64_t{profile_steps} + 1 +
           2 * kServedSteps;
  }
};

/// Times one batch size on a loaded model; fills the row's timing fields.
E2eRow time_batch(engine::Model& model, const E2eArgs& a, const Variant& v, int64_t batch,
                  std::mt19937_64& rng) {
  const int window_steps = v.window(), stagger_L = v.L;
  const engine::ModelConfig& cfg = model.config();
  const int32_t pool = model.options().max_slots;
  std::vector<int32_t> all(static_cast<size_t>(pool));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  const std::vector<int32_t> slots(all.begin(), all.begin() + batch);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(cfg.vocab_size - 1));
  std::vector<int32_t> tokens(static_cast<size_t>(batch));
  for (int32_t& t : tokens) t = tok(rng);

  model.reset(slots);
  model.skip_to_position(slots, a.context);
  // Serving rows are at different points of their flush cycle: row r decodes r mod L steps
  // alone first, so every later step flushes about 1/L of the rows.
  std::vector<float> logits;
  for (int j = 0; j + 1 < stagger_L; ++j) {
    std::vector<int32_t> s, t;
    for (int64_t r = 0; r < batch; ++r)
      if (r % stagger_L > j) {
        s.push_back(slots[r]);
        t.push_back(tokens[r]);
      }
    if (s.empty()) break;
    logits.resize(s.size() * static_cast<size_t>(cfg.vocab_size));
    model.step(t, s, logits);
  }
  model.time_steps(tokens, slots, window_steps, false);  // warm-up (and graph capture)
  const engine::StepTiming t = model.time_steps(tokens, slots, a.windows * window_steps, false);
  std::vector<double> window_ms;
  for (int w = 0; w < a.windows; ++w) {
    double sum = 0;
    for (int i = 0; i < window_steps; ++i) sum += t.step_ms[static_cast<size_t>(w * window_steps + i)];
    window_ms.push_back(sum / window_steps);
  }
  E2eRow row;
  row.variant = engine::ssm_mode_name(v.ssm);
  if (v.ssm == engine::SsmMode::kReplay) row.L = v.L;
  row.state = v.state == "fp32" ? "fp32/fp32" : v.state;
  row.batch = batch;
  row.ms = percentile(window_ms, 0.5);
  row.ms_p10 = percentile(window_ms, 0.1);
  row.ms_p90 = percentile(window_ms, 0.9);
  row.tokens_per_s = static_cast<double>(batch) / (row.ms * 1e-3);
  row.steps_timed = a.windows * window_steps;
  row.window_steps = window_steps;
  for (int p = 0; p < a.profile_steps; ++p) {
    const engine::StepTiming pr = model.time_steps(tokens, slots, 1, true);
    for (const auto& [k, ms] : pr.kind_ms) row.kind_ms[k] += ms / a.profile_steps;
    row.profiled_ms += pr.profiled_ms / a.profile_steps;
  }
  // Whole steps as serve() calls them: logits to the host, or greedy ids only.
  std::vector<double> with_logits, greedy;
  std::vector<int32_t> next(static_cast<size_t>(batch));
  logits.resize(static_cast<size_t>(batch * cfg.vocab_size));
  for (int i = 0; i < kServedSteps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    model.step(tokens, slots, logits);
    auto t1 = std::chrono::steady_clock::now();
    model.step_greedy(tokens, slots, next);
    auto t2 = std::chrono::steady_clock::now();
    with_logits.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    greedy.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
  row.served_logits_ms = percentile(with_logits, 0.5);
  row.served_greedy_ms = percentile(greedy, 0.5);
  const double ssm = (row.kind_ms.count("mamba2") ? row.kind_ms["mamba2"] : 0.0) +
                     (row.kind_ms.count("gdn") ? row.kind_ms["gdn"] : 0.0);
  row.ssm_share = row.profiled_ms > 0 ? ssm / row.profiled_ms : 0.0;
  row.gpu_memory_bytes = model.device_bytes();
  row.max_slots = pool;
  const int dispatched_L = engine::auto_ring_length(cfg, batch, v.state);
  row.dispatched = v.ssm == engine::SsmMode::kReplay ? dispatched_L == v.L : dispatched_L == 1;
  return row;
}

int run_e2e(const E2eArgs& args) {
  E2eArgs a = args;
  if (a.device == "auto") a.device = cuda::device_count() > 0 ? "cuda" : "cpu";
  const BenchSource src = bench_source(a.arch, a.model, a.random_weights, a.seed, "bench e2e");
  const engine::ModelConfig& cfg = src.cfg;
  const engine::Checkpoint& ck = src.ck;
  const std::string& label = src.label;

  sort_unique_or_throw(a.batches, "--batch");
  const int64_t max_batch = a.batches.back();
  for (size_t i = 0; i < a.ring_lengths.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      check<ConfigError>(a.ring_lengths[i] != a.ring_lengths[j], "-L: ", a.ring_lengths[i],
                         " given twice");
  for (std::string& st : a.states) {
    if (st == "fp32/fp32") st = "fp32";
    check<ConfigError>(st.rfind("shared-", 0) != 0, "bench e2e --state: '", st,
                       "' is a shared baseline (a conventional-step mode); bench e2e times "
                       "ReplaySSM variants against the fp32 conventional step (use replayssm eval "
                       "to compare shared baselines)");
    check<ConfigError>(std::count(a.states.begin(), a.states.end(), st) == 1, "--state: '", st,
                       "' given twice");
  }

  // The conventional baseline runs first and again last: step times drift over a long run (on
  // the H200 by up to ~4% at batch 1, growing with each model loaded), so every speedup is taken
  // against the mean of the two, and both are reported.
  std::vector<Variant> variants{{engine::SsmMode::kConventional, 1, "fp32"}};
  for (const std::string& s : a.states)
    for (const int L : a.ring_lengths) variants.push_back({engine::SsmMode::kReplay, L, s});
  variants.push_back(variants.front());

  const auto options_of = [&](const Variant& v) {
    engine::ModelOptions o;
    o.cuda = a.device == "cuda";
    o.ssm = v.ssm;
    o.ring_L = v.L;
    o.state = v.state;
    o.max_slots = static_cast<int32_t>(max_batch);
    o.max_context = a.context + v.positions(a.windows, a.profile_steps);
    return o;
  };
  for (const Variant& v : variants) {  // fail early
    engine::validate_options(cfg, options_of(v));
    if (a.device == "cpu") {
      const engine::SequenceBytes sb = engine::sequence_bytes(cfg, options_of(v));
      check_host_memory(cfg, sb.total(), sb.kv_cache, max_batch, "bench e2e", true);
    }
  }
  if (!a.json_out.empty()) check_writable(a.json_out, "--json");  // after the argument checks

  E2eRunInfo info;
  info.arch = label;
  info.weights = src.weights;
  info.device = a.device;
  info.commit = a.commit.empty() ? git_commit() : a.commit;
  info.context = a.context;
  info.windows = a.windows;
  info.seed = a.seed;
  info.family = ssm_family(cfg);

  fmt::print("bench e2e: {} ({}, {} weights) on {}; batches {}; context {}; {} window{} per "
             "point (16 steps, or the next multiple of L)\n",
             label, info.family, info.weights,
             a.device == "cuda" ? cuda::device_summary() : std::string("the CPU"),
             fmt::format("{}", fmt::join(a.batches, ",")), a.context, a.windows,
             a.windows == 1 ? "" : "s");
  std::vector<E2eRow> rows;
  std::mt19937_64 rng(a.seed);
  Progress bar("bench e2e", static_cast<long>(variants.size() * a.batches.size()));
  // Speedups against the mean of the conventional runs so far; the JSON is rewritten after every
  // variant, so a run that fails later (a mode the device cannot hold) keeps what it measured.
  const auto finish = [&] {
    for (E2eRow& r : rows) {
      double sum = 0;
      int n = 0;
      for (const E2eRow& base : rows)
        if (base.batch == r.batch && base.variant == "conventional") sum += base.ms, ++n;
      r.baseline_ms = sum / n;
      r.speedup = r.baseline_ms / r.ms;
    }
    if (a.json_out.empty()) return;
    std::ofstream f(a.json_out);
    check<ConfigError>(f.good(), "--json: cannot write '", a.json_out, "'");
    f << e2e_json(info, rows).dump(2) << "\n";
  };
  for (size_t i = 0; i < variants.size(); ++i) {
    const std::unique_ptr<engine::Model> model = engine::Model::load(ck, options_of(variants[i]));
    for (const int64_t b : a.batches) {
      rows.push_back(time_batch(*model, a, variants[i], b, rng));
      rows.back().repeat = i + 1 == variants.size() ? 1 : 0;
      bar.tick();
    }
    finish();
  }
  bar.done();
  print_e2e_table(info, rows);
  if (!a.json_out.empty())
    fmt::print("wrote {} (plot: python3 bench/plot_e2e.py {} OUT.png)\n", a.json_out, a.json_out);
  return 0;
}

}  // namespace

void add_bench(CLI::App& app, Action& action) {
  auto* bench = app.add_subcommand(
      "bench", "benchmarks of whole models (the kernel benchmarks are build/bench/replayssm_bench "
               "kernels|verify|floors, built with the CUDA toolkit; floors needs no GPU)");
  bench->require_subcommand(1);
  auto* a = new E2eArgs;  // lives as long as the app (the process)
  auto* sub = bench->add_subcommand(
      "e2e", "decode-step throughput of a whole model: conventional vs ReplaySSM decoding, per "
             "batch size, at a given context");
  sub->footer(comma_list_footer("--batch 1,8,32 -L 8,16"));
  std::string names;
  for (const std::string& n : engine::published_config_names()) names += (names.empty() ? "" : ", ") + n;
  sub->add_option("--arch", a->arch, "a published architecture, built with --random-weights: " + names);
  sub->add_option("--model", a->model, "a checkpoint directory (its weights, or with "
                                       "--random-weights only its config.json)")
      ->check(CLI::ExistingDirectory);
  sub->add_flag("--random-weights", a->random_weights,
                "random weights of a trained model's scale (timing does not depend on the values; "
                "the results say \"weights\": \"random\")");
  comma_list(sub->add_option("--batch", a->batches, "batch sizes, comma-separated"))
      ->check(in_range(int64_t(1), int64_t(65535)))
      ->capture_default_str();
  sub->add_option("--context", a->context, "tokens already in every row's context (KV cache "
                                           "length) when timing starts")
      ->check(in_range(int64_t(0), int64_t(1) << 20))
      ->capture_default_str();
  comma_list(sub->add_option("-L,--ring", a->ring_lengths,
                             "ReplaySSM ring lengths to time, comma-separated (the L sweep), "
                             "each 1..64"))
      ->check(in_range(1, 64))
      ->capture_default_str();
  comma_list(sub->add_option("--state", a->states,
                             "state modes of the replay variants, comma-separated (fp32, or "
                             "split modes such as fp32/bf16; see generate)"))
      ->capture_default_str();
  sub->add_option("--windows", a->windows, "timed windows per point (each 16 steps, or the next "
                                           "multiple of L); the median window is reported")
      ->check(in_range(1, 1000))
      ->capture_default_str();
  sub->add_option("--profile-steps", a->profile_steps,
                  "profiled steps per point (SSM share of the step)")
      ->check(in_range(1, 100))
      ->capture_default_str();
  sub->add_option("--device", a->device, "cpu, cuda or auto (cuda when a CUDA device is present)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  sub->add_option("--seed", a->seed, "seed of the random weights, slots and tokens")
      ->check(seed_validator())
      ->capture_default_str();
  sub->add_option("--json", a->json_out,
                  "write the results as JSON (DESIGN.md §4, bench \"e2e\"; missing folders "
                  "are created)")
      ->check(non_empty());
  sub->add_option("--commit", a->commit, "commit recorded in the JSON (default: git rev-parse "
                                         "HEAD in the working directory)");
  add_threads_option(*sub);
  sub->callback([&action, a] { action = [a] { return run_e2e(*a); }; });
  add_bench_spec(*bench, action);
}

}  // namespace replayssm::cli
