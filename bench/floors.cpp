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

/// The point `row` with one target's fields: kind "ratio_to_decode_step" (replay latency / the
/// baseline's, lower is better) or "speedup" (the baseline's / replay's, higher is better), the
/// two sides' bytes, the bound at equal bandwidth, and the replay side's bandwidth, as a fraction
/// of the baseline side's, that the target (if any at this point) needs.
json with_target(json row, const std::string& kind, const std::string& baseline, double bytes,
                 double baseline_bytes, std::optional<double> target) {
  const bool ratio = kind != "speedup";
  const double bound = ratio ? bytes / baseline_bytes : baseline_bytes / bytes;
  row["target"] = kind;
  row["baseline"] = baseline;
  row["bytes"] = bytes;
  row["baseline_bytes"] = baseline_bytes;
  row["bound"] = bound;
  row["target_value"] = opt(target);
  row["needs_bandwidth_fraction"] =
      !target ? json(nullptr)
      : ratio ? json(bytes / baseline_bytes / *target)
              : json(*target * bytes / baseline_bytes);
  row["meetable"] = !target ? json(nullptr) : json(ratio ? bound <= *target : bound >= *target);
  return row;
}

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
      const json base = {{"bench", "floors"},
                         {"issue", 5},
                         {"family", family},
                         {"shape", shape},
                         {"T", T},
                         {"L", L},
                         {"acceptance", accept == T ? "all-accept" : "all-reject"},
                         {"mean_h", cyc.mean_h},
                         {"flush_fraction", cyc.flush_fraction},
                         {"state", "fp32/fp32"}};
      out.push_back(with_target(base, "ratio_to_decode_step",
                                fmt::format("decode step at h = {}", cfg.L / 2 - 1), verify,
                                decode, ratio_target));
      out.push_back(with_target(base, "speedup", "snapshot", verify, snapshot, speedup_target));
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
      const json point = {{"bench", "floors"},
                          {"issue", 6},
                          {"family", family},
                          {"shape", sh.name},
                          {"state", fmt::format("fp32/{}", state_format_name(rd))},
                          {"L", cfg.L},
                          {"h", h}};
      out.push_back(with_target(point, "speedup", "fp32-read ordinary step", bytes, base, target));
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
