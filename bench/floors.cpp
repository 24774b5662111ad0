#include "floors.h"

#include <fmt/core.h>

#include <algorithm>
#include <optional>

#include "gdn_kernels.h"
#include "mamba2_kernels.h"
#include "spec_cycle.h"
#include "spec_pools.h"
#include "verify_bench.h"

namespace replayssm::bench {
namespace {

using nlohmann::json;

json opt(std::optional<double> v) { return v ? json(*v) : json(nullptr); }

/// Issue 5, per shape: verify of T tokens (ring max(L, 4T)) against one decode step at h = L/2 - 1
/// (verify_bench.cpp's points), and the snapshot baseline against the verify.
void verify_rows(const FloorsConfig& cfg, const char* family, const std::string& shape,
                 const StepBytes& bm, std::vector<json>& out) {
  VerifyConfig vc;
  vc.L = cfg.L;
  const double decode = static_cast<double>(bm.ordinary(cfg.L / 2 - 1));
  for (int T : {2, 4, 6, 8}) {
    const int L = verify_ring_length(vc, T);
    const RingConfig rc{L, T, RingMode::kSpeculative};
    // Every start phase the bench draws from (h in 0..L-T), L steps each: the bench's mean.
    std::vector<Cursor> start;
    for (int h = 0; h <= L - T; ++h) start.push_back({0, h, h + 2 * T > L});
    const std::optional<double> ratio_target =
        T == 4 ? std::optional(1.25) : T == 8 ? std::optional(1.5) : std::nullopt;
    const std::optional<double> speedup_target =
        T == 4 ? std::optional(3.0) : T == 8 ? std::optional(4.0) : std::nullopt;
    for (int accept : {T, 1}) {
      const Cycle cyc = cycle_of(rc, accept, start, L);
      const double verify = bm.verify(T, cyc.mean_h, cyc.flush_fraction);
      const double snapshot = bm.snapshot(T);
      json base = {{"bench", "floors"},    {"issue", 5},
                   {"family", family},     {"shape", shape},
                   {"T", T},               {"L", L},
                   {"acceptance", accept == T ? "all-accept" : "all-reject"},
                   {"mean_h", cyc.mean_h}, {"flush_fraction", cyc.flush_fraction},
                   {"state", "fp32/fp32"}};
      json r = base;
      r["target"] = "ratio_to_decode_step";  // lower is better
      r["bytes"] = verify;
      r["baseline_bytes"] = decode;
      r["baseline"] = fmt::format("decode step at h = {}", cfg.L / 2 - 1);
      r["bound"] = verify / decode;
      r["target_value"] = opt(ratio_target);
      // the verify's bandwidth as a fraction of the decode step's that the target needs
      r["needs_bandwidth_fraction"] = opt(ratio_target ? std::optional(verify / decode / *ratio_target)
                                                       : std::nullopt);
      r["meetable"] = ratio_target ? json(verify / decode <= *ratio_target) : json(nullptr);
      out.push_back(r);
      json s = base;
      s["target"] = "speedup";  // snapshot latency / verify latency, higher is better
      s["bytes"] = verify;
      s["baseline_bytes"] = snapshot;
      s["baseline"] = "snapshot";
      s["bound"] = snapshot / verify;
      s["target_value"] = opt(speedup_target);
      // the verify's bandwidth as a fraction of the snapshot baseline's that the target needs
      s["needs_bandwidth_fraction"] =
          opt(speedup_target ? std::optional(*speedup_target * verify / snapshot) : std::nullopt);
      s["meetable"] = speedup_target ? json(snapshot / verify >= *speedup_target) : json(nullptr);
      out.push_back(s);
    }
  }
}

/// Issue 6, per shape and read format: the ordinary step at h reading the copy against reading
/// the fp32 checkpoint (precision benchmark's "step" rows), at h = 1, L/2 - 1, L - 2 and the mean
/// over h = 0..L-2 (a window's ordinary steps).
template <class Shape, class ModeBytes>
void read_rows(const FloorsConfig& cfg, const char* family, const Shape& sh, ModeBytes mode_bytes,
               std::vector<json>& out) {
  const StepBytes f32 = mode_bytes(sh, DType::kF32, StateFormat::kFp32);
  for (StateFormat rd : {StateFormat::kBf16, StateFormat::kFp16, StateFormat::kFp8,
                         StateFormat::kNvfp4}) {
    const StepBytes bm = mode_bytes(sh, DType::kF32, rd);
    const std::optional<double> target =
        rd == StateFormat::kNvfp4 ? std::optional(4.0)
        : rd == StateFormat::kFp8 ? std::nullopt
                                  : std::optional(1.8);
    auto row = [&](const json& h, double base, double bytes) {
      json r = {{"bench", "floors"},
                {"issue", 6},
                {"family", family},
                {"shape", sh.name},
                {"state", fmt::format("fp32/{}", state_format_name(rd))},
                {"L", cfg.L},
                {"h", h},
                {"target", "speedup"},  // fp32-read µs / this step's µs, higher is better
                {"baseline", "fp32-read ordinary step"},
                {"bytes", bytes},
                {"baseline_bytes", base},
                {"bound", base / bytes},
                {"target_value", opt(target)},
                {"needs_bandwidth_fraction",
                 opt(target ? std::optional(*target * bytes / base) : std::nullopt)},
                {"meetable", target ? json(base / bytes >= *target) : json(nullptr)}};
      out.push_back(r);
    };
    for (int h : {1, cfg.L / 2 - 1, cfg.L - 2})
      row(h, static_cast<double>(f32.ordinary(h)), static_cast<double>(bm.ordinary(h)));
    double base = 0, bytes = 0;
    for (int h = 0; h + 1 < cfg.L; ++h)
      base += static_cast<double>(f32.ordinary(h)), bytes += static_cast<double>(bm.ordinary(h));
    row("mean", base, bytes);
  }
}

}  // namespace

std::vector<json> run_floors(const FloorsConfig& cfg) {
  std::vector<json> out;
  for (const Mamba2Shape& s : mamba2_shapes())
    verify_rows(cfg, "mamba2", s.name, Mamba2Spec::bytes_of(s), out);
  for (const GdnShape& s : gdn_shapes())
    verify_rows(cfg, s.family.c_str(), s.name, GdnSpec::bytes_of(s), out);
  for (const Mamba2Shape& s : mamba2_shapes()) read_rows(cfg, "mamba2", s, mamba2_mode_bytes, out);
  for (const GdnShape& s : gdn_shapes()) read_rows(cfg, s.family.c_str(), s, gdn_mode_bytes, out);
  return out;
}

std::string floors_table(const std::vector<json>& rows) {
  std::string t = fmt::format("{:<6} {:<13} {:<11} {:<24} {:<11} {:>9} {:>7} {:>9}  {}\n", "issue",
                              "shape", "state", "point", "compares", "bound", "target",
                              "needs bw", "meetable at equal bandwidth");
  for (const json& r : rows) {
    const std::string point =
        r["issue"] == 5 ? fmt::format("T {} L {} {}", r["T"].get<int>(), r["L"].get<int>(),
                                      r["acceptance"].get<std::string>())
                        : fmt::format("h {}", r["h"].is_string() ? r["h"].get<std::string>()
                                                                 : std::to_string(r["h"].get<int>()));
    const bool has = !r["target_value"].is_null();
    t += fmt::format("{:<6} {:<13} {:<11} {:<24} {:<11} {:>8.3f}x {:>7} {:>9}  {}\n",
                     r["issue"].get<int>(), r["shape"].get<std::string>(),
                     r["state"].get<std::string>(), point,
                     r["target"] == "speedup" ? "speedup" : "ratio",
                     r["bound"].get<double>(),
                     has ? fmt::format("{:.2f}x", r["target_value"].get<double>()) : "-",
                     has ? fmt::format("{:.1f}%", 100 * r["needs_bandwidth_fraction"].get<double>())
                         : "-",
                     has ? (r["meetable"].get<bool>() ? "yes" : "NO") : "-");
  }
  return t;
}

}  // namespace replayssm::bench
