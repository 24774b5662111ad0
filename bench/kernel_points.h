// The family-neutral measurement loop of `replayssm_bench kernels` (bench/README.md "Method"): per
// shape and batch a pool of R * batch slots, the conventional step, then at each ring length the
// replay modes (step h = 1 and h = L-2, flush, window, mixed) with the dispatcher's route and, at
// the main points, each route forced. A family (mamba2_kernels.cpp, gdn_kernels.cpp) supplies its
// pool, plans, routes and byte model through the Family concept documented on run_points.
#pragma once
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "replayssm/precision.h"
#include <vector>

#include "byte_model.h"
#include "replayssm/dispatch.h"
#include "cuda_util.h"
#include "replayssm/tensor.h"
#include "results.h"
#include "timing.h"

namespace replayssm::bench {

struct KernelConfig {
  std::vector<std::string> shapes;      ///< of the family being run
  std::vector<int64_t> batches;         ///< main points: every variant and route at ring length L
  int L = 16;
  std::vector<int> sweep_L;             ///< L sweep: dispatcher route, every mode
  std::vector<int64_t> sweep_batches;
  DType state = DType::kF32;            ///< state / checkpoint dtype
  StateFormat read = StateFormat::kFp32;  ///< split modes: the read copy's format, else kFp32
                                          ///< (no copy)
  uint64_t seed = 1;
  bool dense_slots = false;             ///< each call's slots in order (SlotPool), not drawn
  TimingConfig timing;
  double copy_gbps = 0;                 ///< for pct_copy_bw
  std::function<void()> on_graph;       ///< called after each timed graph (progress)
  std::function<void(const std::string&)> on_point;  ///< one-line summary per point
};

/// Working-set rule of the method: R = ceil(512 MiB / bytes of the smallest call), clamped to
/// 2..64, so that between two touches of one call's slots the graph moves >= 8x the 60 MB L2.
int calls_per_graph(double smallest_call_bytes);

/// "fp32/fp32", "fp32/bf16" (a split read copy) etc.; throws BenchError for a dtype not
/// benchmarked.
std::string state_name(DType t, StateFormat read = StateFormat::kFp32);
/// Main and sweep batches, sorted, each once.
std::vector<int64_t> all_batches(const KernelConfig& cfg);
/// The L values a batch is measured at, each with whether every route runs (main points) or only
/// the dispatcher's (the L sweep).
std::vector<std::pair<int, bool>> ring_lengths(const KernelConfig& cfg, int64_t batch);
/// (mode, h) of the replay measurements at ring length L.
std::vector<std::pair<std::string, std::optional<int>>> replay_modes(int L);
/// Graphs run_points times per shape, with `nroutes` routes (auto first) at the main points.
long graphs_per_shape(const KernelConfig& cfg, int nroutes);
/// Bytes a full run of one shape moves in its timed, warm and eager replays (the run-time
/// estimate printed before a run): every graph's bytes times its passes.
double run_bytes_per_shape(const KernelConfig& cfg, const StepBytes& bm, int nroutes);

/// The pool interface measure() needs (both families' pools have it).
struct PoolStats {
  int64_t batch, slots;
  int calls;
  DType state;
  StateFormat read;
};

/// Times one graph and fills the measured part of a row: per-call µs (replay time over R calls and
/// `steps` steps), GB/s of `bytes` per call, % of the copy ceiling. poison() runs before and
/// check(what) after the timing.
Row measure(const PoolStats& pool, const std::function<void()>& poison,
            const std::function<void(const std::string&)>& check,
            const std::function<void(cudaStream_t)>& enqueue, int steps, double bytes,
            const KernelConfig& cfg, cudaStream_t stream, const std::string& what);

/// Runs every point of one shape and appends its rows. Family F provides:
///   family (std::string), routes (std::vector<F::Route>, auto first), route_name(Route),
///   bytes (StepBytes), make_pool(batch, R, seed, stream, dense_slots) -> std::unique_ptr<Pool>,
///   plan_conventional(batch) / plan_replay(batch, L) -> Plan, plan_json(Plan, bool replay),
///   with_route(Plan, Route) -> Plan (a default plan with only the route forced when Route is not
///   auto). Pool: set_ring(L), set_cursors_fixed(h), set_cursors_mixed(), enqueue_conventional(s),
///   enqueue_replay(s, Plan, steps, commit), poison_outputs(), check_finite(what), batch(),
///   calls(), slots(), state_dtype().
template <class F>
void run_points(const KernelConfig& cfg, const F& fam, const std::string& shape,
                std::vector<Row>& rows) {
  Stream stream;
  const cudaStream_t s = stream.get();
  const StepBytes& bm = fam.bytes;
  for (int64_t batch : all_batches(cfg)) {
    // Sized by the smallest call (an ordinary step with no history): every variant's graph
    // then moves >= 512 MiB between two touches of the same slots.
    const int R = calls_per_graph(static_cast<double>(bm.ordinary(0)) * batch);
    auto pool = fam.make_pool(batch, R, cfg.seed + 1000003ull * batch, s, cfg.dense_slots);
    const PoolStats ps{pool->batch(), pool->slots(), pool->calls(), pool->state_dtype(),
                       pool->read_format()};
    const auto poison = [&] { pool->poison_outputs(); };
    const auto check = [&](const std::string& w) { pool->check_finite(w); };
    const std::string where = fmt::format("{} batch {}", shape, batch);

    Row conv = measure(
        ps, poison, check, [&](cudaStream_t st) { pool->enqueue_conventional(st); }, 1,
        static_cast<double>(bm.conventional()) * batch, cfg, s, where + " conventional");
    conv.family = fam.family;
    conv.shape = shape;
    conv.variant = "conventional";
    conv.speedup = 1.0;
    conv.plan = fam.plan_json(fam.plan_conventional(batch), false);
    rows.push_back(conv);

    // The dispatcher's state size: one sequence's state in float32 (dispatch.h).
    const int64_t fp32_state = bm.state_bytes * 4 / dtype_size(ps.state);
    for (const auto& [L, main] : ring_lengths(cfg, batch)) {
      pool->set_ring(L);
      const auto auto_plan = fam.plan_replay(batch, L);
      const size_t first = rows.size();
      for (const auto route : fam.routes) {
        const bool is_auto = route == fam.routes.front();
        if (!main && !is_auto) continue;
        const auto forced = fam.with_route(route);
        auto chosen = auto_plan;
        if (!is_auto) chosen.route = route;
        for (const auto& [mode, h] : replay_modes(L)) {
          const std::string label = fmt::format("{} L {} replay {} {}{} ({})", where, L, mode,
                                                h ? "h " : "", h ? std::to_string(*h) : "",
                                                fam.route_name(route));
          double bytes = 0;
          int steps = 1;
          bool commit = false;
          if (mode == "step") {
            pool->set_cursors_fixed(*h);
            bytes = static_cast<double>(bm.ordinary(*h));
          } else if (mode == "flush") {
            pool->set_cursors_fixed(*h);
            bytes = static_cast<double>(bm.flush(L));
          } else if (mode == "window") {
            pool->set_cursors_fixed(0);  // every row starts a window: L-1 ordinary steps, a flush
            bytes = bm.window(L);
            steps = L;
            commit = true;
          } else {
            pool->set_cursors_mixed();
            bytes = bm.window(L);
            commit = true;
          }
          Row r = measure(
              ps, poison, check,
              [&](cudaStream_t st) { pool->enqueue_replay(st, forced, steps, commit); }, steps,
              bytes * batch, cfg, s, label);
          r.family = fam.family;
          r.shape = shape;
          r.variant = "replay";
          r.L = L;
          r.mode = mode;
          r.h = h;
          r.route = fam.route_name(route);
          r.route_chosen = fam.route_name(chosen.route);
          r.plan = fam.plan_json(chosen, true);
          r.commit_in_graph = commit;
          r.speedup = conv.us / r.us;
          r.dispatched = is_auto && mode == "window" &&
                         L == recommended_ring_length(fam.ssm_family, batch, cfg.L, cfg.read,
                                                      fp32_state);
          rows.push_back(r);
        }
      }
      const Row* win_auto = nullptr;
      const Row* mix_auto = nullptr;
      for (size_t i = first; i < rows.size(); ++i) {
        if (rows[i].route == "auto" && rows[i].mode == "window") win_auto = &rows[i];
        if (rows[i].route == "auto" && rows[i].mode == "mixed") mix_auto = &rows[i];
      }
      if (cfg.on_point && win_auto && mix_auto)
        cfg.on_point(fmt::format("{} L {} (R {}): conventional {:.2f} us, window {:.2f} us "
                                 "(x{:.2f}), mixed {:.2f} us (x{:.2f})",
                                 where, L, R, conv.us, win_auto->us, win_auto->speedup,
                                 mix_auto->us, mix_auto->speedup));
    }
  }
}

}  // namespace replayssm::bench
