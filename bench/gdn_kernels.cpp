#include "gdn_kernels.h"

#include <algorithm>
#include <memory>

#include "cuda/gdn/gdn_cuda.h"
#include "gdn_pool.h"

namespace replayssm::bench {

StepBytes gdn_mode_bytes(const GdnShape& s, DType state, StateFormat read) {
  StepBytes b = gdn_bytes(s.H, s.HV, s.K, s.V, s.gate() == gdn::Gate::kChannel ? s.K : 1,
                          dtype_size(state));
  // Split modes: ordinary steps read the copy and the history's u, k^, g, and append v and
  // beta (fp32) beside their record, which only the flush reads (v in place of u:
  // flush.cuh EXACT). Counted as a whole record per history entry until session 33, which
  // overstated the 16-bit steps' % of copy at large h (Qwen3.5-4B h = 14: 433 MB counted for
  // 373.9 MB moved). (fp16sr/fp16sr: they read the float16 checkpoint itself, no copy.)
  if (read != StateFormat::kFp32) {
    if (read != StateFormat::kFp16Sr) b.copy_bytes = state_format_bytes(read, s.HV, s.V, s.K);
    b.record_extra_bytes = s.HV * s.V * 4 + s.HV * 4;
    b.flush_record_bytes = b.record_bytes + s.HV * 4;
  }
  return b;
}

namespace {

namespace cg = cuda::gdn;

/// The Family of run_points for one GDN/KDA shape.
struct GdnFamily {
  using Route = cg::Route;
  std::string family;
  SsmFamily ssm_family;
  /// The routes each main point is measured with: the dispatcher's choice, then each forced.
  std::vector<Route> routes = {Route::kAuto, Route::kOutputOnly, Route::kStateAndOutput};
  gdn::Dims dims;
  DType state;
  StateFormat read;
  StepBytes bytes;

  GdnFamily(const GdnShape& s, DType st, StateFormat rd)
      : family(s.family),
        ssm_family(s.gate() == gdn::Gate::kChannel ? SsmFamily::kKda : SsmFamily::kGdn),
        dims{s.H, s.HV, s.K, s.V, s.gate()},
        state(st),
        read(rd),
        bytes(gdn_mode_bytes(s, st, rd)) {
    if (rd == StateFormat::kFp8 || rd == StateFormat::kNvfp4)
      routes.pop_back();  // a quantised copy's ordinary rows run output-only
  }

  static const char* route_name(Route r) { return cg::route_name(r); }
  std::unique_ptr<GdnPool> make_pool(int64_t batch, int R, uint64_t seed, cudaStream_t s,
                                     bool dense_slots) const {
    return std::make_unique<GdnPool>(dims, batch, state, R, seed, s, read, dense_slots);
  }
  cg::Plan plan_conventional(int64_t batch) const {
    return cg::plan_conventional(dims, batch, state);
  }
  /// The ordinary launch's plan (split modes: over the read copy; kU8 stands for a quantised one).
  cg::Plan plan_replay(int64_t batch, int L) const {
    const DType t = read == StateFormat::kFp32 || read == StateFormat::kFp16Sr ? state
                    : read == StateFormat::kBf16                               ? DType::kBF16
                    : read == StateFormat::kFp16 ? DType::kF16
                                                 : DType::kU8;
    return cg::plan_replay(dims, batch, L, t);
  }
  static cg::Plan with_route(Route r) {
    cg::Plan p;
    p.route = r;
    return p;
  }
  static nlohmann::json plan_json(const cg::Plan& p, bool replay) {
    nlohmann::json j;
    j["rows_per_block"] = p.rows_per_block;
    j["rows_per_thread"] = p.rows_per_thread;
    j["bulk_copy"] = p.bulk_copy;
    if (replay) {
      j["route"] = cg::route_name(p.route);
      j["prefetch_ring"] = p.prefetch_ring;
    }
    return j;
  }
};

const GdnShape& find_shape(const std::string& name) {
  const auto it = std::find_if(gdn_shapes().begin(), gdn_shapes().end(),
                               [&](const GdnShape& x) { return x.name == name; });
  if (it == gdn_shapes().end()) throw BenchError("unknown gdn/kda shape " + name);
  return *it;
}

}  // namespace

const std::vector<GdnShape>& gdn_shapes() {
  static const std::vector<GdnShape> shapes = {{"qwen3.5-4b", "gdn", 16, 32, 128, 128},
                                               {"qwen3.5-122b", "gdn", 16, 64, 128, 128},
                                               {"kimi-linear", "kda", 32, 32, 128, 128}};
  return shapes;
}

std::vector<std::string> gdn_shape_names(const std::string& family) {
  std::vector<std::string> names;
  for (const GdnShape& s : gdn_shapes())
    if (s.family == family) names.push_back(s.name);
  return names;
}

long gdn_graph_count(const KernelConfig& cfg) {
  return static_cast<long>(cfg.shapes.size()) * graphs_per_shape(cfg, 3);
}

double gdn_run_bytes(const KernelConfig& cfg) {
  double b = 0;
  for (const std::string& name : cfg.shapes)
    b += run_bytes_per_shape(cfg, GdnFamily(find_shape(name), cfg.state, cfg.read).bytes, 3);
  return b;
}

std::vector<Row> run_gdn(const KernelConfig& cfg) {
  std::vector<Row> rows;
  for (const std::string& name : cfg.shapes)
    run_points(cfg, GdnFamily(find_shape(name), cfg.state, cfg.read), name, rows);
  return rows;
}

}  // namespace replayssm::bench
