#include "eval_report.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>

#include "cli_words.h"
#include "cuda/device.h"
#include "replayssm/precision.h"
#include "run_info.h"

namespace replayssm::cli {
namespace {

using engine::CandidateResult;
using engine::EvalResult;
using engine::EvalStats;
using nlohmann::json;

constexpr int64_t kOpen = std::numeric_limits<int64_t>::max();

std::string model_name(const std::string& dir) {
  std::filesystem::path p(dir);
  if (!p.has_filename()) p = p.parent_path();  // "models/x/" -> "x"
  return p.filename().string();
}

const char* variant(const engine::ModelOptions& o) { return engine::ssm_mode_name(o.ssm); }

json ring(const engine::ModelOptions& o) {
  return o.ssm == engine::SsmMode::kReplay ? json(o.ring_L) : json(nullptr);
}

json stats_row(const EvalRunInfo& info, const std::string& model, const EvalResult& r,
               const CandidateResult& c, const EvalStats& s, const std::string& bucket) {
  return {{"model", model},
          {"state", c.config.label},
          {"variant", variant(c.config.options)},
          {"L", ring(c.config.options)},
          {"bucket", bucket},
          {"bucket_begin", s.begin},
          {"bucket_end", s.end == kOpen ? json(nullptr) : json(s.end)},
          {"positions", s.positions},
          {"windows", r.windows},
          {"kl", s.kl},
          {"kl_max", s.kl_max},
          {"top1_agreement", s.top1_agreement},
          {"bits_per_byte", s.bits_per_byte},
          {"ref_bits_per_byte", s.ref_bits_per_byte},
          {"emulated", std::find(info.emulated.begin(), info.emulated.end(), c.config.label) !=
                           info.emulated.end()},
          {"baseline", std::string(variant(r.reference.options)) + " fp32/fp32"}};
}

/// The bucket the shared-vs-split ratio is taken in: 64K-128K when reached, else the last one.
const EvalStats& far_bucket(const CandidateResult& c) {
  for (const EvalStats& s : c.buckets)
    if (s.begin == 65536) return s;
  return c.buckets.back();
}

/// A split mode name of precision.h (fp32/fp32 is not one: it has no low-precision state).
bool is_split_mode(const std::string& label) {
  try {
    return parse_state_mode(label).is_split();
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

std::string state_label(const std::string& mode) { return mode == "fp32" ? "fp32/fp32" : mode; }

void print_eval_table(const EvalRunInfo& info, const EvalResult& r) {
  const double per_s = double(r.positions) / std::max(r.seconds, 1e-9);
  const bool ref_replay = r.reference.options.ssm == engine::SsmMode::kReplay;
  fmt::print("{}: {} token{} of {} in {} window{} of {} ({} position{} each); reference {}{} {}\n",
             model_name(info.model), r.tokens_used, cli::plural_s(r.tokens_used), info.text,
             r.windows, cli::plural_s(r.windows), r.window_tokens, r.window_tokens - 1,
             cli::plural_s(r.window_tokens - 1), variant(r.reference.options),
             ref_replay ? fmt::format(" L {}", r.reference.options.ring_L) : std::string(),
             r.reference.label);
  fmt::print("{:.2f} s: {:.0f} positions/s ({:.0f} decode tokens/s over {} models, device {})\n\n",
             r.seconds, per_s, per_s * double(1 + r.candidates.size()), 1 + r.candidates.size(),
             info.device);
  // The state column fits the longest label ("fp16sr/fp16sr": 13 characters) and any longer one.
  size_t state_w = 13;
  for (const CandidateResult& c : r.candidates) state_w = std::max(state_w, c.config.label.size());
  fmt::print("{:<{}} {:<12} {:>3} {:<9} {:>9} {:>10} {:>10} {:>7} {:>9} {:>10}\n", "state",
             state_w, "ssm", "L", "bucket", "positions", "mean KL", "max KL", "top-1", "bits/B",
             "ref bits/B");
  for (const CandidateResult& c : r.candidates) {
    const auto& o = c.config.options;
    const std::string L = o.ssm == engine::SsmMode::kReplay ? std::to_string(o.ring_L) : "-";
    auto line = [&](const std::string& bucket, const EvalStats& s) {
      fmt::print("{:<{}} {:<12} {:>3} {:<9} {:>9} {:>10.3e} {:>10.3e} {:>7.4f} {:>9.4f} {:>10.4f}\n",
                 c.config.label, state_w, variant(o), L, bucket, s.positions, s.kl, s.kl_max,
                 s.top1_agreement, s.bits_per_byte, s.ref_bits_per_byte);
    };
    if (&c != &r.candidates.front()) fmt::print("\n");
    line("all", c.all);
    for (const EvalStats& s : c.buckets) line(engine::bucket_label(s.begin, s.end), s);
  }
  fmt::print("\nKL(reference || mode) in nats per position; top-1 = argmax agreement; bits/B = "
             "-log2 p(next byte)\n");
  if (!info.emulated.empty())
    fmt::print("emulated on CUDA (the mode's values over float32 storage, no kernels of their "
               "own): {}\n", fmt::join(info.emulated, ", "));
}

json eval_json(const EvalRunInfo& info, const EvalResult& r) {
  const std::string model = model_name(info.model);
  json j;
  j["bench"] = "kl";
  j["commit"] = info.commit;
  j["date"] = utc_now();
  j["device"] = info.device;
  j["gpu"] = info.device == "cuda" ? json(cuda::device_summary()) : json(nullptr);
  j["cpu"] = cpu_name();
  j["cpu_threads"] = omp_get_max_threads();  // the CPU team (--threads, else one per core)
  j["model"] = model;
  j["text"] = info.text;
  j["text_tokens"] = info.text_tokens;
  j["tokens"] = r.tokens_used;
  j["windows"] = r.windows;
  j["window_tokens"] = r.window_tokens;
  j["positions_per_mode"] = r.positions;
  j["bucket_edges"] = info.bucket_edges;
  j["reference"] = {{"state", r.reference.label}, {"variant", variant(r.reference.options)}};
  j["seconds"] = r.seconds;
  j["method"] = {
      {"decode", "teacher-forced, token by token on the decode path; windows = consecutive "
                 "chunks of the text decoded as one batch; reference and modes in lockstep"},
      {"position", "0-based position of the fed token within its window (predicting the next)"},
      {"kl", "mean over positions of KL(reference || mode) of the next-token distributions, "
             "nats, float64 log-softmax of float32 logits"},
      {"bits_per_byte", "mean -log2 p(actual next byte)"}};
  json rows = json::array();
  for (const CandidateResult& c : r.candidates) {
    rows.push_back(stats_row(info, model, r, c, c.all, "all"));
    for (const EvalStats& s : c.buckets)
      rows.push_back(stats_row(info, model, r, c, s, engine::bucket_label(s.begin, s.end)));
  }
  const CandidateResult* shared = nullptr;
  for (const CandidateResult& c : r.candidates)
    if (c.config.label == "shared-nvfp4") shared = &c;
  if (shared != nullptr) {
    const EvalStats& base = far_bucket(*shared);
    for (const CandidateResult& c : r.candidates) {
      if (!is_split_mode(c.config.label)) continue;
      const EvalStats& s = far_bucket(c);
      rows.push_back({{"model", model},
                      {"state", c.config.label},
                      {"variant", variant(c.config.options)},
                      {"L", ring(c.config.options)},
                      {"bucket", engine::bucket_label(s.begin, s.end)},
                      {"kl_reduction_vs_shared", s.kl > 0 ? json(base.kl / s.kl) : json(nullptr)},
                      {"baseline", "shared-nvfp4"}});
    }
  }
  j["rows"] = rows;
  return j;
}

}  // namespace replayssm::cli
