#include "e2e_report.h"

#include <fmt/core.h>

#include <algorithm>
#include <set>

#include "cuda/device.h"
#include "run_info.h"

namespace replayssm::cli {
namespace {

using nlohmann::json;

std::string variant_name(const E2eRow& r) {
  std::string v = r.L ? fmt::format("{} L{}", r.variant, *r.L) : r.variant;
  if (r.repeat) v += " (again)";
  if (r.state != "fp32/fp32") v += " " + r.state;
  return v;
}

}  // namespace

void print_e2e_table(const E2eRunInfo& info, const std::vector<E2eRow>& rows) {
  fmt::print("\n{} ({} weights, {}), context {}: ms per decode step (speedup over conventional), "
             "SSM share of the step\n",
             info.arch, info.weights, info.device, info.context);
  std::vector<std::string> variants;
  for (const E2eRow& r : rows) {
    const std::string v = variant_name(r);
    if (std::find(variants.begin(), variants.end(), v) == variants.end()) variants.push_back(v);
  }
  fmt::print("{:>6}", "batch");
  for (const std::string& v : variants) fmt::print("  {:>28}", v);
  fmt::print("\n");
  std::set<int64_t> batches;
  for (const E2eRow& r : rows) batches.insert(r.batch);
  for (const int64_t b : batches) {
    fmt::print("{:>6}", b);
    for (const std::string& v : variants) {
      const E2eRow* hit = nullptr;
      for (const E2eRow& r : rows)
        if (r.batch == b && variant_name(r) == v) hit = &r;
      if (!hit) {
        fmt::print("  {:>28}", "-");
        continue;
      }
      fmt::print("  {:>28}", fmt::format("{:.3f} ({:.2f}x) ssm {:.0f}%{}", hit->ms, hit->speedup,
                                         100.0 * hit->ssm_share, hit->dispatched ? " *" : ""));
    }
    fmt::print("\n");
  }
  fmt::print("(speedup over the mean of the two conventional runs; * the ring length the "
             "dispatcher recommends for that batch, dispatch.h; tokens/s = batch / ms in the "
             "JSON)\n");
  // The two conventional runs bracket the others: far apart, the machine's load changed
  // during the point and its speedups say more about that than about the decoding.
  for (const int64_t b : batches) {
    double lo = 0, hi = 0;
    for (const E2eRow& r : rows)
      if (r.batch == b && r.variant == "conventional" && r.state == "fp32/fp32" && r.ms > 0) {
        lo = lo == 0 ? r.ms : std::min(lo, r.ms);
        hi = std::max(hi, r.ms);
      }
    if (lo > 0 && hi > 1.25 * lo)
      fmt::print("note: batch {}: the two conventional runs differ {:.1f}x ({:.3f} / {:.3f} ms): "
                 "the machine's load changed during the point, its speedups are not reliable\n",
                 b, hi / lo, lo, hi);
  }
  // What a serving loop pays per step on top: the logits download (step) or one id per row
  // (step_greedy), for the first variant.
  fmt::print("whole steps as a serving loop calls them ({}), ms: step() with the logits / "
             "step_greedy()\n", variants.empty() ? std::string("-") : variants[0]);
  for (const E2eRow& r : rows)
    if (!variants.empty() && variant_name(r) == variants[0])
      fmt::print("{:>6}  {:.3f} / {:.3f}\n", r.batch, r.served_logits_ms, r.served_greedy_ms);
}

json e2e_json(const E2eRunInfo& info, const std::vector<E2eRow>& rows) {
  json j;
  j["bench"] = "e2e";
  j["commit"] = info.commit;
  j["date"] = utc_now();
  j["gpu"] = info.device == "cuda" ? json(cuda::device_summary()) : json(nullptr);
  j["cpu"] = cpu_name();
  j["device"] = info.device;
  j["arch"] = info.arch;
  j["weights"] = info.weights;
  j["context"] = info.context;
  j["windows"] = info.windows;
  j["seed"] = info.seed;
  const bool gpu = info.device == "cuda";
  j["method"] =
      std::string("per (variant, batch): fresh slots chosen at random from the pool, moved to "
                  "position `context` (the KV cache holds that many positions; the timed steps "
                  "run up to ~2 windows past it), ring phases staggered across rows as in "
                  "serving (row r first decodes r mod L steps alone), warm-up, then `windows` "
                  "windows of `window_steps` decode steps (whole flush cycles of the row's L)") +
      (gpu ? ", replayed from CUDA graphs and timed with CUDA events, logits kept on the device"
           : ", timed on the host clock (logits computed into a host buffer)") +
      "; ms = median over windows of the window's mean step time; the conventional baseline "
      "runs first and again last (repeat 1), speedup = the mean of the two / ms. ssm_share from "
      "separately profiled steps (" +
      (gpu ? "an event between sub-layers" : "the host clock between sub-layers") +
      "). served_logits_ms / served_greedy_ms: whole Model::step() (logits to the host) and "
      "Model::step_greedy() (one id per row to the host) calls on the host clock, median of a "
      "few steps each: what a serving loop pays per step.";
  json out = json::array();
  for (const E2eRow& r : rows) {
    json x;
    x["arch"] = info.arch;
    x["shape"] = info.arch;
    x["family"] = info.family;
    x["weights"] = info.weights;
    x["context"] = info.context;
    x["batch"] = r.batch;
    x["variant"] = r.variant;
    x["L"] = r.L ? json(*r.L) : json(nullptr);
    x["state"] = r.state;
    x["ms_per_step"] = r.ms;
    x["ms_p10"] = r.ms_p10;
    x["ms_p90"] = r.ms_p90;
    x["us"] = r.ms * 1e3;
    x["tokens_per_s"] = r.tokens_per_s;
    x["ssm_share"] = r.ssm_share;
    x["kind_ms"] = r.kind_ms;
    x["profiled_ms"] = r.profiled_ms;
    x["served_logits_ms"] = r.served_logits_ms;
    x["served_greedy_ms"] = r.served_greedy_ms;
    x["speedup"] = r.speedup;
    x["baseline"] = "conventional";
    x["baseline_ms"] = r.baseline_ms;
    x["repeat"] = r.repeat;
    x["dispatched"] = r.dispatched;
    x["gpu_memory_bytes"] = info.device == "cuda" ? json(r.gpu_memory_bytes) : json(nullptr);
    x["max_slots"] = r.max_slots;
    x["steps_timed"] = r.steps_timed;
    x["window_steps"] = r.window_steps;
    x["phases"] = "staggered";
    out.push_back(std::move(x));
  }
  j["rows"] = std::move(out);
  return j;
}

}  // namespace replayssm::cli
