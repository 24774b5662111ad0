#include "mamba2_kernels.h"

#include <algorithm>
#include <memory>

#include "cuda/mamba2/mamba2_cuda.h"
#include "mamba2_pool.h"

namespace replayssm::bench {

StepBytes mamba2_mode_bytes(const Mamba2Shape& s, DType state, StateFormat read) {
  StepBytes b = mamba2_bytes(s.H, s.P, s.N, s.G, dtype_size(state));
  // (fp16sr/fp16sr: ordinary steps read the float16 checkpoint itself, no copy.)
  if (read != StateFormat::kFp32 && read != StateFormat::kFp16Sr)
    b.copy_bytes = state_format_bytes(read, s.H, s.P, s.N);
  return b;
}

namespace {

namespace cm = cuda::mamba2;

/// Whether a read format is a quantised copy (fp8, nvfp4): its ordinary rows have no
/// state-and-output route.
bool quantised(StateFormat f) { return f == StateFormat::kFp8 || f == StateFormat::kNvfp4; }

/// The Family of run_points for one Mamba-2 shape.
struct Mamba2Family {
  using Route = cm::Route;
  std::string family = "mamba2";
  SsmFamily ssm_family = SsmFamily::kMamba2;
  /// The routes each main point is measured with: the dispatcher's choice, then each forced.
  std::vector<Route> routes = {Route::kAuto, Route::kOutputOnly, Route::kStateAndOutput};
  mamba2::Dims dims;
  DType state;
  StateFormat read;
  StepBytes bytes;

  Mamba2Family(const Mamba2Shape& s, DType st, StateFormat rd)
      : dims{s.H, s.P, s.N, s.G},
        state(st),
        read(rd),
        bytes(mamba2_mode_bytes(s, st, rd)) {
    if (quantised(rd)) routes.pop_back();  // a quantised copy's ordinary rows run output-only
  }

  static const char* route_name(Route r) { return cm::route_name(r); }
  std::unique_ptr<Mamba2Pool> make_pool(int64_t batch, int R, uint64_t seed, cudaStream_t s,
                                        bool dense_slots) const {
    return std::make_unique<Mamba2Pool>(dims, batch, state, R, seed, s, read, dense_slots);
  }
  cm::Plan plan_conventional(int64_t batch) const {
    return cm::plan_conventional(dims, batch, state);
  }
  /// The ordinary launch's plan (split modes: over the read copy).
  cm::Plan plan_replay(int64_t batch, int L) const {
    const int bits = read == StateFormat::kFp8     ? 8
                     : read == StateFormat::kNvfp4 ? 4
                     : read != StateFormat::kFp32  ? 16
                                                   : static_cast<int>(8 * dtype_size(state));
    return cm::plan_replay_bits(dims, batch, L, bits);
  }
  static cm::Plan with_route(Route r) {
    cm::Plan p;
    p.route = r;
    return p;
  }
  static nlohmann::json plan_json(const cm::Plan& p, bool replay) {
    nlohmann::json j;
    j["rows_per_block"] = p.rows_per_block;
    j["rows_per_thread"] = p.rows_per_thread;
    if (replay) {
      j["route"] = cm::route_name(p.route);
      j["heads_per_block"] = p.heads_per_block;
      j["prefetch_ring"] = p.prefetch_ring;
    }
    return j;
  }
};

const Mamba2Shape& find_shape(const std::string& name) {
  const auto it = std::find_if(mamba2_shapes().begin(), mamba2_shapes().end(),
                               [&](const Mamba2Shape& x) { return x.name == name; });
  if (it == mamba2_shapes().end()) throw BenchError("unknown mamba2 shape " + name);
  return *it;
}

}  // namespace

const std::vector<Mamba2Shape>& mamba2_shapes() {
  static const std::vector<Mamba2Shape> shapes = {{"nano-4b", 96, 80, 128, 8},
                                                  {"super-120b", 128, 64, 128, 8}};
  return shapes;
}

long mamba2_graph_count(const KernelConfig& cfg) {
  return static_cast<long>(cfg.shapes.size()) * graphs_per_shape(cfg, quantised(cfg.read) ? 2 : 3);
}

double mamba2_run_bytes(const KernelConfig& cfg) {
  double b = 0;
  for (const std::string& name : cfg.shapes)
    b += run_bytes_per_shape(cfg, Mamba2Family(find_shape(name), cfg.state, cfg.read).bytes,
                             quantised(cfg.read) ? 2 : 3);
  return b;
}

std::vector<Row> run_mamba2(const KernelConfig& cfg) {
  std::vector<Row> rows;
  for (const std::string& name : cfg.shapes)
    run_points(cfg, Mamba2Family(find_shape(name), cfg.state, cfg.read), name, rows);
  return rows;
}

}  // namespace replayssm::bench
