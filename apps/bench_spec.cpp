// `replayssm bench spec`: speculative decoding throughput (issue 9 item 3) — standard decoding,
// the peers' snapshot speculative decoding and ReplaySSM speculative decoding through the same
// engine, at a model's real layer structure (random weights) and an acceptance trace drawn once
// and replayed identically for every system: a row feeding T tokens keeps k of them, k = 1 + the
// drafts accepted one after another, each with probability --alpha (so E[k] = 1 + a + ... +
// a^(T-1)). Each system's throughput is committed tokens per second; each system's memory is
// Model sequence_bytes, and the largest batch a --memory-budget holds follows from it.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "cli_checks.h"
#include "cli_words.h"
#include "commands.h"
#include "cuda/device.h"
#include "progress.h"
#include "replayssm/engine/checkpoint.h"
#include "replayssm/engine/config.h"
#include "replayssm/engine/memory.h"
#include "replayssm/engine/model.h"
#include "replayssm/errors.h"
#include "run_info.h"
#include "spec_served.h"
#include "threads.h"

namespace replayssm::cli {
namespace {

using nlohmann::json;

struct SpecArgs {
  std::string arch, model, device = "auto", json_out, commit;
  bool random_weights = false;
  std::vector<int64_t> batches = {1, 8, 32, 64, 128, 256, 512};
  std::vector<int> Ts = {4};
  double alpha = 0.7, budget_gib = 100.0;
  int64_t context = 1024;
  int steps = 8;
  uint64_t seed = 20261201;
  // Real drafters instead of an acceptance trace (spec_served.h).
  std::string drafter, prompts_file;
  int prompt_len = 64, new_tokens = 128;
  // Options given on the command line that only one of the two modes reads.
  std::vector<std::string> trace_only_given, drafter_only_given;
};

/// Tokens each row commits per verify step, [step][row], each in 1..T.
std::vector<std::vector<int32_t>> acceptance_trace(int steps, int64_t batch, int T, double alpha,
                                                   uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<std::vector<int32_t>> trace(static_cast<size_t>(steps));
  for (auto& step : trace) {
    step.resize(static_cast<size_t>(batch));
    for (int32_t& k : step) {
      k = 1;
      while (k < T && u(rng) < alpha) ++k;
    }
  }
  return trace;
}

struct Point {
  std::string variant;  // standard | snapshot | replay
  int T = 1;
  int64_t batch = 0;
  double ms = 0;              ///< median per step (decode step or verify + accept)
  double tokens_per_s = 0;    ///< committed tokens per second
  double mean_accepted = 1;   ///< committed tokens per row and step
  int64_t seq_bytes = 0;      ///< sequence_bytes(...).total()
  int64_t max_batch = 0;      ///< sequences the memory budget holds
  int L = 0;                  ///< ring length (standard, replay)
  bool fits = true;           ///< false: the device could not hold this many sequences
  double draft_acceptance = 0;  ///< --drafter: share of drafts kept
  /// One more step timed part by part (CUDA; StepTiming::kind_ms), milliseconds per block kind.
  std::map<std::string, double> kind_ms;
};

engine::ModelOptions options(const SpecArgs& a, const std::string& variant, int T,
                             int64_t max_batch) {
  engine::ModelOptions o;
  o.cuda = a.device == "cuda";
  o.max_slots = static_cast<int32_t>(max_batch);
  // Per point: a warm-up call (on CUDA an eager and a timed step for a new shape), the timed
  // steps and a profiled one, each committing at most T tokens per row.
  o.max_context = a.drafter.empty() ? a.context + (a.steps + 3) * T + 2
                                     : a.prompt_len + a.new_tokens + 2 * T + 2;
  o.ssm = variant == "snapshot" ? engine::SsmMode::kConventional : engine::SsmMode::kReplay;
  o.spec_T = variant == "standard" ? 0 : T;
  o.ring_L = std::max(16, 2 * T);  // a verify ring holds 2T records (snapshot: unused)
  return o;
}

/// Times `steps` verify + accept steps (or, for standard, decode steps) of one batch size.
Point time_point(engine::Model& model, const SpecArgs& a, const std::string& variant, int T,
                 int64_t batch, std::mt19937_64& rng) {
  Point p;
  p.variant = variant;
  p.T = T;
  p.batch = batch;
  p.L = model.options().ring_L;
  if (!a.drafter.empty()) {  // the serving loops with a real drafter (they reset their slots)
    const auto reqs = served_requests(a.prompts_file, batch, a.prompt_len, a.new_tokens);
    const ServedPoint sp = time_served(model, reqs, variant == "standard" ? 0 : T, a.drafter);
    p.ms = sp.ms;
    p.tokens_per_s = sp.tokens_per_s;
    p.mean_accepted = sp.mean_accepted;
    p.draft_acceptance = sp.draft_acceptance;
    return p;
  }
  const engine::ModelConfig& cfg = model.config();
  std::vector<int32_t> slots(static_cast<size_t>(batch));
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  model.reset(slots);
  model.skip_to_position(slots, a.context);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(cfg.vocab_size - 1));
  if (variant == "standard") {
    std::vector<int32_t> tokens(static_cast<size_t>(batch));
    for (int32_t& t : tokens) t = tok(rng);
    model.time_steps(tokens, slots, 1, false);  // warm-up
    const engine::StepTiming t = model.time_steps(tokens, slots, a.steps, a.device == "cuda");
    p.kind_ms = t.kind_ms;
    p.ms = percentile(t.step_ms, 0.5);
    p.tokens_per_s = static_cast<double>(batch) / (p.ms * 1e-3);
    return p;
  }
  // The same trace for snapshot and replay: seeded by (T, batch) only.
  const auto trace = acceptance_trace(a.steps + 1, batch, T, a.alpha,
                                      a.seed ^ (static_cast<uint64_t>(T) << 32) ^ uint64_t(batch));
  const std::vector<int32_t> ntok(static_cast<size_t>(batch), T);
  std::vector<int32_t> tokens(static_cast<size_t>(batch * T));
  for (int32_t& t : tokens) t = tok(rng);
  // Step 0 warms up; the others are timed (the same rows every step: timing does not depend on
  // the token values, and the logits stay on the device on CUDA as in a serving engine).
  const std::span<const std::vector<int32_t>> all(trace);
  model.time_verify(tokens, ntok, slots, all.first(1));
  const engine::StepTiming t =
      model.time_verify(tokens, ntok, slots, all.subspan(1), a.device == "cuda");
  p.kind_ms = t.kind_ms;
  int64_t committed = 0;
  double seconds = 0;
  for (double ms : t.step_ms) seconds += ms * 1e-3;
  for (size_t s = 1; s < trace.size(); ++s)
    for (const int32_t k : trace[s]) committed += k;
  p.ms = percentile(t.step_ms, 0.5);
  p.tokens_per_s = static_cast<double>(committed) / seconds;
  p.mean_accepted = static_cast<double>(committed) / static_cast<double>(batch * a.steps);
  return p;
}

int run_spec(const SpecArgs& args) {
  SpecArgs a = args;
  if (a.device == "auto") a.device = cuda::device_count() > 0 ? "cuda" : "cpu";
  check<ConfigError>(a.drafter.empty() == a.prompts_file.empty(),
                     "bench spec: --drafter and --prompts go together (real drafters on prompts; "
                     "without them an acceptance trace, --alpha)");
  check<ConfigError>(a.drafter.empty() || a.trace_only_given.empty(), "bench spec: ",
                     a.trace_only_given.empty() ? "" : a.trace_only_given[0],
                     " sets the acceptance trace, which --drafter replaces (use --prompt-len / "
                     "--new-tokens)");
  check<ConfigError>(!a.drafter.empty() || a.drafter_only_given.empty(), "bench spec: ",
                     a.drafter_only_given.empty() ? "" : a.drafter_only_given[0],
                     " needs --drafter and --prompts");
  const BenchSource src = bench_source(a.arch, a.model, a.random_weights, a.seed, "bench spec");
  sort_unique_or_throw(a.batches, "--batch");
  sort_unique_or_throw(a.Ts, "-T");
  const int64_t max_batch = a.batches.back();
  for (const int T : a.Ts)
    for (const char* v : {"standard", "snapshot", "replay"}) {  // fail early
      engine::validate_options(src.cfg, options(a, v, T, max_batch));
      if (a.device == "cpu") {
        const engine::SequenceBytes sb = engine::sequence_bytes(src.cfg, options(a, v, T, max_batch));
        check_host_memory(src.cfg, sb.total(), sb.kv_cache, max_batch, "bench spec", false);
      }
    }
  if (!a.drafter.empty()) {  // the drafter and prompts before any output (one-line errors)
    (void)served_requests(a.prompts_file, 1, a.prompt_len, a.new_tokens);
    if (a.drafter != "ngram") {  // model:DIR (drafter_spec checked the form while parsing)
      const engine::Checkpoint draft = engine::Checkpoint::open(a.drafter.substr(6));
      const int64_t dv = engine::parse_config_of(draft).vocab_size;
      check<ConfigError>(dv == src.cfg.vocab_size, "bench spec: draft model ", a.drafter.substr(6),
                         " has vocab ", dv, ", the target ", src.cfg.vocab_size);
    }
  }
  if (!a.json_out.empty()) check_writable(a.json_out, "--json");  // after the argument checks

  const std::string how =
      a.drafter.empty()
          ? fmt::format("per-draft acceptance {}; context {}; {} timed steps per point", a.alpha,
                        a.context, a.steps)
          : fmt::format("drafter {} on {}-byte prompts of {}, {} new tokens each (decode phase "
                        "timed)", a.drafter, a.prompt_len, a.prompts_file, a.new_tokens);
  fmt::print("bench spec: {} ({}, {} weights) on {}; batches {}; T {}; {}\n", src.label,
             ssm_family(src.cfg), src.weights,
             a.device == "cuda" ? cuda::device_summary() : std::string("the CPU"),
             fmt::join(a.batches, ","), fmt::join(a.Ts, ","), how);
  // The context the per-sequence memory is counted at (--drafter: prompt + generated tokens).
  const int64_t context = a.drafter.empty() ? a.context : int64_t{a.prompt_len} + a.new_tokens;
  std::vector<Point> points;
  std::mt19937_64 rng(a.seed);
  Progress bar("bench spec", static_cast<long>((1 + 2 * a.Ts.size()) * a.batches.size()));
  const double budget = a.budget_gib * 1024.0 * 1024.0 * 1024.0;
  const auto run = [&](const std::string& v, int T) {
    const int64_t per_seq = engine::sequence_bytes(src.cfg, options(a, v, T, max_batch)).total();
    // The largest batch the device holds: a variant that runs out of device memory at load is
    // loaded again for the next smaller batch; the batches above are reported as not fitting
    // (the snapshot baseline keeps T + 1 states per sequence).
    std::unique_ptr<engine::Model> model;
    size_t fit = a.batches.size();
    while (!model && fit > 0) {
      try {
        model = engine::Model::load(src.ck, options(a, v, T, a.batches[fit - 1]));
      } catch (const DeviceError& e) {
        if (std::string(e.what()).find("cudaErrorMemoryAllocation") == std::string::npos) throw;
        --fit;
      }
    }
    for (size_t i = 0; i < a.batches.size(); ++i) {
      Point p;
      if (i < fit) {
        p = time_point(*model, a, v, T, a.batches[i], rng);
      } else {
        p.variant = v;
        p.T = T;
        p.batch = a.batches[i];
        p.L = options(a, v, T, max_batch).ring_L;
        p.fits = false;
      }
      p.seq_bytes = per_seq;
      // (capped: a double past 2^63 has no int64 value; --memory-budget is bounded too)
      p.max_batch = static_cast<int64_t>(std::min(budget / static_cast<double>(per_seq), 0x1p62));
      points.push_back(p);
      bar.tick();
    }
  };
  run("standard", 1);
  for (const int T : a.Ts) {
    run("snapshot", T);
    run("replay", T);
  }
  bar.done();

  const auto find = [&](const std::string& v, int T, int64_t b) -> const Point* {
    for (const Point& p : points)
      if (p.variant == v && (v == "standard" || p.T == T) && p.batch == b) return &p;
    return nullptr;
  };
  json rows = json::array();
  for (const int T : a.Ts) {
    fmt::print("\nT = {}: committed tokens/s (replay / snapshot, replay / standard)\n", T);
    fmt::print("{:>6} {:>12} {:>12} {:>12} {:>9} {:>9}  mean accepted (snapshot / replay)\n",
               "batch", "standard", "snapshot", "replay", "/snap", "/std");
    // "oom": the device could not hold that batch for the variant.
    const auto rate = [](const Point* p) {
      return p->fits ? fmt::format("{:.1f}", p->tokens_per_s) : std::string("oom");
    };
    // Each variant's own: with a real drafter they can differ (greedy splits at near-ties).
    const auto accepted = [](const Point* p) {
      return p->fits ? fmt::format("{:.2f}", p->mean_accepted) : std::string("-");
    };
    const auto ratio = [](const Point* x, const Point* y) {
      return x->fits && y->fits ? fmt::format("{:.2f}x", x->tokens_per_s / y->tokens_per_s)
                                : std::string("-");
    };
    for (const int64_t b : a.batches) {
      const Point *st = find("standard", T, b), *sn = find("snapshot", T, b), *re = find("replay", T, b);
      fmt::print("{:>6} {:>12} {:>12} {:>12} {:>9} {:>9}  {}\n", b, rate(st), rate(sn),
                 rate(re), ratio(re, sn), ratio(re, st),
                 fmt::format("{} / {}", accepted(sn), accepted(re)));
    }
    fmt::print("sequences in {:.3g} GiB of per-sequence memory at context {}: standard {}, "
               "snapshot {}, replay {}\n",
               a.budget_gib, context, find("standard", T, a.batches[0])->max_batch,
               find("snapshot", T, a.batches[0])->max_batch,
               find("replay", T, a.batches[0])->max_batch);
    // Where a step's time goes (CUDA: one profiled step per point), at the largest batch each
    // variant held.
    for (const char* v : {"standard", "snapshot", "replay"}) {
      const Point* at = nullptr;
      for (const int64_t b : a.batches)
        if (const Point* p = find(v, T, b); p->fits && !p->kind_ms.empty()) at = p;
      if (!at) continue;
      std::string parts;
      for (const auto& [k, ms] : at->kind_ms) parts += fmt::format(" {} {:.2f}", k, ms);
      fmt::print("  {} at batch {}: ms per step{}\n", v, at->batch, parts);
    }
  }
  for (const Point& p : points) {
    const bool spec = p.variant != "standard";
    const Point* st = find("standard", p.T, p.batch);
    json x;
    x["arch"] = src.label;
    x["shape"] = src.label;
    x["family"] = ssm_family(src.cfg);
    x["batch"] = p.batch;
    x["variant"] = p.variant;
    x["T"] = spec ? json(p.T) : json(1);
    x["L"] = p.variant == "snapshot" ? json(nullptr) : json(p.L);  // snapshot: no ring
    x["state"] = "fp32/fp32";
    // Points the device could not hold: null measurements, "fits_device": false.
    const auto rel = [&](const Point* base) {
      return p.fits && base->fits ? json(p.tokens_per_s / base->tokens_per_s) : json(nullptr);
    };
    x["fits_device"] = p.fits;
    x["ms_per_step"] = p.fits ? json(p.ms) : json(nullptr);
    x["tokens_per_s"] = p.fits ? json(p.tokens_per_s) : json(nullptr);
    x["mean_accepted"] = p.fits ? json(p.mean_accepted) : json(nullptr);
    x["acceptance"] = !spec ? json(nullptr)
                      : a.drafter.empty() ? json(fmt::format("per-draft {}", a.alpha))
                                          : json("drafter " + a.drafter);
    if (spec && !a.drafter.empty())
      x["draft_acceptance"] = p.fits ? json(p.draft_acceptance) : json(nullptr);
    x["speedup"] = rel(st);
    x["baseline"] = "standard";
    if (p.variant == "replay") x["speedup_vs_snapshot"] = rel(find("snapshot", p.T, p.batch));
    if (!p.kind_ms.empty()) x["kind_ms"] = p.kind_ms;
    x["sequence_bytes"] = p.seq_bytes;
    x["max_batch_in_budget"] = p.max_batch;
    rows.push_back(std::move(x));
  }
  if (!a.json_out.empty()) {
    json j;
    j["bench"] = "spec";
    j["commit"] = a.commit.empty() ? git_commit() : a.commit;
    j["date"] = utc_now();
    j["gpu"] = a.device == "cuda" ? json(cuda::device_summary()) : json(nullptr);
    j["cpu"] = cpu_name();
    j["device"] = a.device;
    j["weights"] = src.weights;
    j["context"] = context;
    j["alpha"] = a.drafter.empty() ? json(a.alpha) : json(nullptr);  // a trace's, not a drafter's
    j["memory_budget_gib"] = a.budget_gib;
    if (!a.drafter.empty()) {
      j["drafter"] = a.drafter;
      j["prompts"] = a.prompts_file;
      j["prompt_len"] = a.prompt_len;
      j["new_tokens"] = a.new_tokens;
    }
    j["method"] = !a.drafter.empty() ?
        "per (variant, T, batch): `batch` requests of `prompt_len`-byte prompts decoded together "
        "greedily through the engine's serving loops (standard: serve(), one token per step; "
        "snapshot / replay: serve_speculative() with the drafter), host clock after every step; "
        "tokens_per_s = generated tokens after the prompts' last step / the time from that step "
        "to the last (the speculative loop's chunked prefill is not counted); mean_accepted and "
        "draft_acceptance from the loop's statistics. max_batch_in_budget = memory_budget / "
        "sequence_bytes (weights not included)." :
        "per (variant, T, batch): fresh slots at position `context`; a warm-up call (on CUDA one "
        "eager and one timed step for a new shape), then "
        "`steps` verify + accept steps (standard: decode steps; Model::time_verify / time_steps: "
        "CUDA events around each step's launches on CUDA, the logits staying on the device; the "
        "host clock on the CPU); each row feeds T tokens and commits the count the acceptance trace gives (the same trace for "
        "snapshot and replay); tokens_per_s = committed tokens / time. max_batch_in_budget = "
        "memory_budget / sequence_bytes (weights not included).";
    j["rows"] = std::move(rows);
    std::ofstream f(a.json_out);
    check<ConfigError>(f.good(), "--json: cannot write '", a.json_out, "'");
    f << j.dump(2) << "\n";
    fmt::print("wrote {} (plot: python3 bench/plot_spec.py {} OUT.png)\n", a.json_out, a.json_out);
  }
  return 0;
}

}  // namespace

void add_bench_spec(CLI::App& bench, Action& action) {
  auto* a = new SpecArgs;  // lives as long as the app (the process)
  auto* sub = bench.add_subcommand(
      "spec", "speculative decoding throughput: standard vs snapshot vs ReplaySSM speculative "
              "decoding with one acceptance trace");
  sub->footer(comma_list_footer("--batch 1,8,32 -T 2,4"));
  sub->add_option("--arch", a->arch, "a published architecture, built with --random-weights");
  sub->add_option("--model", a->model, "a checkpoint directory")->check(CLI::ExistingDirectory);
  sub->add_flag("--random-weights", a->random_weights, "random weights of a trained model's scale");
  comma_list(sub->add_option("--batch", a->batches, "batch sizes, comma-separated"))
      ->check(in_range(int64_t(1), int64_t(65535)))
      ->capture_default_str();
  comma_list(sub->add_option("-T", a->Ts,
                             "tokens fed per row and verify step (last token + T-1 drafts), "
                             "comma-separated, each 2..8"))
      ->check(in_range(2, 8))
      ->capture_default_str();
  sub->add_option("--alpha", a->alpha, "probability that each draft is accepted (given the ones "
                                       "before it were)")
      ->check(in_range(0.0, 1.0))
      ->capture_default_str();
  sub->add_option("--context", a->context, "tokens already in every row's context")
      ->check(in_range(int64_t(0), int64_t(1) << 20))
      ->capture_default_str();
  sub->add_option("--steps", a->steps, "timed steps per point")->check(in_range(1, 10000))
      ->capture_default_str();
  sub->add_option("--memory-budget", a->budget_gib,
                  "GiB of per-sequence memory the capacity column is computed for")
      ->check(positive_number())
      ->check(in_range(0.0, 1.0e9).description(""))  // one type text in --help: NUMBER > 0
      ->capture_default_str();
  sub->add_option("--device", a->device, "cpu, cuda or auto (cuda when a CUDA device is present)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  sub->add_option("--seed", a->seed, "seed of the weights, slots, tokens and acceptance trace")
      ->check(seed_validator())
      ->capture_default_str();
  sub->add_option("--drafter", a->drafter,
                  "time the serving loops with a real drafter on --prompts instead of an "
                  "acceptance trace: ngram or model:DIR (a draft model with the same vocabulary)")
      ->check(drafter_spec());
  sub->add_option("--prompts", a->prompts_file,
                  "with --drafter: a text file, one prompt per line (lines shorter than "
                  "--prompt-len are skipped, the others cut to it; cycled to fill a batch)")
      ->check(CLI::ExistingFile);
  sub->add_option("--prompt-len", a->prompt_len, "with --drafter: prompt bytes per request")
      ->check(in_range(1, 1 << 16))
      ->capture_default_str();
  sub->add_option("--new-tokens", a->new_tokens, "with --drafter: tokens generated per request")
      ->check(in_range(2, 1 << 16))
      ->capture_default_str();
  sub->add_option("--json", a->json_out,
                  "write the results as JSON (DESIGN.md §4, bench \"spec\"; missing folders "
                  "are created)")
      ->check(non_empty());
  sub->add_option("--commit", a->commit, "commit recorded in the JSON");
  add_threads_option(*sub);
  sub->callback([&action, a, sub] {
    for (const char* o : {"--alpha", "--context", "--steps"})
      if (sub->count(o) > 0) a->trace_only_given.emplace_back(o);
    for (const char* o : {"--prompt-len", "--new-tokens"})
      if (sub->count(o) > 0) a->drafter_only_given.emplace_back(o);
    action = [a] { return run_spec(*a); };
  });
}

}  // namespace replayssm::cli
