#include "mamba2_kernels.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "byte_model.h"
#include "cuda/mamba2/mamba2_cuda.h"
#include "cuda_util.h"
#include "mamba2_pool.h"

namespace replayssm::bench {
namespace {

namespace cm = cuda::mamba2;

bool contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

/// The routes each main point is measured with: the dispatcher's choice, then each route forced.
const cm::Route kRoutes[] = {cm::Route::kAuto, cm::Route::kOutputOnly, cm::Route::kStateAndOutput};

std::string state_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "fp32/fp32";
    case DType::kF16:
      return "fp16/fp16";
    case DType::kBF16:
      return "bf16/bf16";
    default:
      throw BenchError(std::string("state dtype ") + dtype_name(t) + " is not benchmarked");
  }
}

/// The L values a batch is measured at, each with whether every route runs (main points) or only
/// the dispatcher's (the L sweep).
std::vector<std::pair<int, bool>> ring_lengths(const Mamba2Config& cfg, int64_t batch) {
  std::vector<std::pair<int, bool>> out;
  const bool main = contains(cfg.batches, batch);
  if (main) out.emplace_back(cfg.L, true);
  if (contains(cfg.sweep_batches, batch))
    for (int L : cfg.sweep_L)
      if (!(main && L == cfg.L)) out.emplace_back(L, false);
  return out;
}

/// (mode, h) of the replay measurements at ring length L.
std::vector<std::pair<std::string, std::optional<int>>> replay_modes(int L) {
  std::vector<std::pair<std::string, std::optional<int>>> m;
  m.emplace_back("step", 1);
  if (L - 2 != 1) m.emplace_back("step", L - 2);
  m.emplace_back("flush", L - 1);
  m.emplace_back("window", std::nullopt);
  m.emplace_back("mixed", std::nullopt);
  return m;
}

std::vector<int64_t> all_batches(const Mamba2Config& cfg) {
  std::vector<int64_t> b = cfg.batches;
  for (int64_t x : cfg.sweep_batches)
    if (!contains(b, x)) b.push_back(x);
  std::sort(b.begin(), b.end());
  return b;
}

nlohmann::json plan_json(const cm::Plan& p, bool replay) {
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

/// Times one graph and fills the measured part of a row: per-call µs (replay time over R calls and
/// `steps` steps), GB/s of `bytes` per call, % of the copy ceiling.
Row measure(Mamba2Pool& pool, const std::function<void(cudaStream_t)>& enqueue, int steps,
            double bytes, const Mamba2Config& cfg, cudaStream_t stream, const std::string& what) {
  pool.poison_outputs();
  const ReplayStats st = time_graph(enqueue, stream, cfg.timing);
  pool.check_finite(what);
  const double per = 1e3 / (static_cast<double>(pool.calls()) * steps);  // ms per replay -> µs
  Row r;
  r.batch = pool.batch();
  r.state = state_name(pool.state_dtype());
  r.us = st.median_ms * per;
  r.us_p10 = st.p10_ms * per;
  r.us_p90 = st.p90_ms * per;
  r.bytes = bytes;
  r.gbps = bytes / r.us / 1e3;
  r.pct_copy_bw = cfg.copy_gbps > 0 ? 100.0 * r.gbps / cfg.copy_gbps : 0.0;
  r.calls = pool.calls();
  r.steps = steps;
  r.pool_slots = pool.slots();
  r.replays = cfg.timing.timed_replays;
  if (cfg.on_graph) cfg.on_graph();
  return r;
}

}  // namespace

const std::vector<Mamba2Shape>& mamba2_shapes() {
  static const std::vector<Mamba2Shape> shapes = {{"nano-4b", 96, 80, 128, 8},
                                                  {"super-120b", 128, 64, 128, 8}};
  return shapes;
}

int calls_per_graph(double smallest_call_bytes) {
  const double target = 512.0 * (1 << 20);
  const double r = std::ceil(target / smallest_call_bytes);
  return static_cast<int>(std::clamp(r, 2.0, 64.0));
}

long mamba2_graph_count(const Mamba2Config& cfg) {
  long n = 0;
  for (size_t s = 0; s < cfg.shapes.size(); ++s)
    for (int64_t batch : all_batches(cfg)) {
      ++n;  // conventional
      for (const auto& [L, main] : ring_lengths(cfg, batch))
        n += static_cast<long>(replay_modes(L).size()) * (main ? 3 : 1);
    }
  return n;
}

std::vector<Row> run_mamba2(const Mamba2Config& cfg) {
  std::vector<Row> rows;
  Stream stream;
  const cudaStream_t s = stream.get();
  for (const std::string& name : cfg.shapes) {
    const auto it = std::find_if(mamba2_shapes().begin(), mamba2_shapes().end(),
                                 [&](const Mamba2Shape& x) { return x.name == name; });
    if (it == mamba2_shapes().end()) throw BenchError("unknown mamba2 shape " + name);
    const Mamba2Shape& shape = *it;
    const mamba2::Dims dims{shape.H, shape.P, shape.N, shape.G};
    const Mamba2Bytes bm{shape.H, shape.P, shape.N, shape.G, dtype_size(cfg.state)};

    for (int64_t batch : all_batches(cfg)) {
      // Sized by the smallest call (an ordinary step with no history): every variant's graph
      // then moves >= 512 MiB between two touches of the same slots.
      const int R = calls_per_graph(static_cast<double>(bm.ordinary(0)) * batch);
      Mamba2Pool pool(dims, batch, cfg.state, R, cfg.seed + 1000003ull * batch, s);
      const std::string where = fmt::format("{} batch {}", shape.name, batch);

      Row conv = measure(
          pool, [&](cudaStream_t st) { pool.enqueue_conventional(st); }, 1,
          static_cast<double>(bm.conventional()) * batch, cfg, s, where + " conventional");
      conv.shape = shape.name;
      conv.variant = "conventional";
      conv.speedup = 1.0;
      conv.plan = plan_json(cm::plan_conventional(dims, batch, cfg.state), false);
      rows.push_back(conv);

      for (const auto& [L, main] : ring_lengths(cfg, batch)) {
        pool.set_ring(L);
        const cm::Plan auto_plan = cm::plan_replay(dims, batch, L, cfg.state);
        const Row* win_auto = nullptr;
        size_t first = rows.size();
        for (cm::Route route : kRoutes) {
          if (!main && route != cm::Route::kAuto) continue;
          cm::Plan forced;
          forced.route = route;
          cm::Plan chosen = auto_plan;
          if (route != cm::Route::kAuto) chosen.route = route;
          for (const auto& [mode, h] : replay_modes(L)) {
            const std::string label = fmt::format("{} L {} replay {} {}{} ({})", where, L, mode,
                                                  h ? "h " : "", h ? std::to_string(*h) : "",
                                                  cm::route_name(route));
            double bytes = 0;
            int steps = 1;
            bool commit = false;
            if (mode == "step") {
              pool.set_cursors_fixed(*h);
              bytes = static_cast<double>(bm.ordinary(*h));
            } else if (mode == "flush") {
              pool.set_cursors_fixed(*h);
              bytes = static_cast<double>(bm.flush(L));
            } else if (mode == "window") {
              pool.set_cursors_fixed(0);  // every row starts a window: L-1 ordinary steps, a flush
              bytes = bm.window(L);
              steps = L;
              commit = true;
            } else {
              pool.set_cursors_mixed();
              bytes = bm.window(L);
              commit = true;
            }
            Row r = measure(
                pool, [&](cudaStream_t st) { pool.enqueue_replay(st, forced, steps, commit); },
                steps, bytes * batch, cfg, s, label);
            r.shape = shape.name;
            r.variant = "replay";
            r.L = L;
            r.mode = mode;
            r.h = h;
            r.route = cm::route_name(route);
            r.route_chosen = cm::route_name(chosen.route);
            r.plan = plan_json(chosen, true);
            r.commit_in_graph = commit;
            r.speedup = conv.us / r.us;
            rows.push_back(r);
          }
        }
        for (size_t i = first; i < rows.size(); ++i)
          if (rows[i].route == "auto" && rows[i].mode == "window") win_auto = &rows[i];
        const Row* mix_auto = nullptr;
        for (size_t i = first; i < rows.size(); ++i)
          if (rows[i].route == "auto" && rows[i].mode == "mixed") mix_auto = &rows[i];
        if (cfg.on_point && win_auto && mix_auto)
          cfg.on_point(fmt::format("{} L {} (R {}): conventional {:.2f} us, window {:.2f} us "
                                   "(x{:.2f}), mixed {:.2f} us (x{:.2f})",
                                   where, L, R, conv.us, win_auto->us, win_auto->speedup,
                                   mix_auto->us, mix_auto->speedup));
      }
    }
  }
  return rows;
}

}  // namespace replayssm::bench
