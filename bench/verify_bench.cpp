#include "verify_bench.h"

#include <fmt/core.h>

#include <algorithm>
#include <vector>

#include "cuda/common/snapshot_select.h"
#include "device_fill.h"
#include "slot_pool.h"
#include "spec_cycle.h"
#include "spec_pools.h"

namespace replayssm::bench {
namespace {

constexpr DType kF32 = DType::kF32, kI32 = DType::kI32;

/// The snapshot baseline's state pool for T tokens: per row a source state and T snapshot
/// states (row i reads slot (T + 1) i and writes the T after it).
struct SnapshotPool {
  DeviceMemory states, src, dst, next;
  int64_t slots;
  SnapshotPool(int64_t state_elems, int64_t rows, int T, uint64_t seed, cudaStream_t s)
      : slots(rows * (T + 1)) {
    states = DeviceMemory(nbytes(slots * state_elems, kF32));
    fill_uniform(states.get(), kF32, slots * state_elems, -1.0f, 1.0f, seed, s);
    std::vector<int32_t> sv(static_cast<size_t>(rows)), dv(static_cast<size_t>(rows * T));
    for (int64_t r = 0; r < rows; ++r) {
      sv[r] = static_cast<int32_t>(r * (T + 1));
      for (int t = 0; t < T; ++t) dv[r * T + t] = static_cast<int32_t>(r * (T + 1) + 1 + t);
    }
    src = DeviceMemory(nbytes(rows, kI32));
    dst = DeviceMemory(nbytes(rows * T, kI32));
    next = DeviceMemory(nbytes(rows, kI32));
    upload(src, sv, s);
    upload(dst, dv, s);
  }
};

nlohmann::json row_of(const Row& m, const char* family, const std::string& shape,
                      const std::string& variant, int L) {
  nlohmann::json j;
  j["family"] = family;
  j["shape"] = shape;
  j["batch"] = m.batch;
  j["variant"] = variant;
  j["state"] = "fp32/fp32";
  j["L"] = L;
  j["us"] = m.us;
  j["us_p10"] = m.us_p10;
  j["us_p90"] = m.us_p90;
  j["bytes"] = m.bytes;
  j["gbps"] = m.gbps;
  j["pct_copy_bw"] = m.pct_copy_bw;
  j["calls"] = m.calls;
  j["steps"] = m.steps;
  j["pool_slots"] = m.pool_slots;
  j["replays"] = m.replays;
  return j;
}

/// Every point of one shape: Pool is Mamba2Spec or GdnSpec (spec_pools.h).
template <class Pool, class Shape>
void run_shape(const VerifyConfig& cfg, const Shape& sh, std::vector<nlohmann::json>& out) {
  Stream stream;
  const cudaStream_t s = stream.get();
  const int Tmax = *std::max_element(cfg.Ts.begin(), cfg.Ts.end());
  for (int64_t batch : cfg.batches) {
    const StepBytes bm = Pool::bytes_of(sh, cfg.inputs);
    const int calls = calls_per_graph(static_cast<double>(bm.state()) * batch);
    Pool pool(sh, batch, calls, verify_ring_length(cfg, Tmax), Tmax,
              cfg.timing.seed + 7919ull * batch, s, cfg.inputs);
    const PoolStats ps{batch, pool.slots(), calls, kF32, StateFormat::kFp32};
    const std::string where = fmt::format("{} batch {}", sh.name, batch);

    // One ordinary ReplaySSM decode step: every row at h = L/2 - 1 (mean history of a window).
    const int hd = cfg.L / 2 - 1;
    pool.set_decode_cursors(cfg.L, hd);
    const Row dec = measure(
        ps, [&] { pool.poison(); }, [&](const std::string& w) { pool.check(1, w); },
        [&](cudaStream_t st) {
          for (int r = 0; r < calls; ++r) pool.decode(r, st, cfg.L);
        },
        1, static_cast<double>(bm.ordinary(hd)) * batch, cfg.timing, s, where + " decode step");
    nlohmann::json dj = row_of(dec, pool.family(), sh.name, "decode-step", cfg.L);
    dj["h"] = hd;
    out.push_back(dj);

    for (int T : cfg.Ts) {
      const int L = verify_ring_length(cfg, T);
      const RingConfig scfg{L, T, RingMode::kSpeculative};
      double snap_us[2] = {0, 0};
      std::vector<nlohmann::json> snap_rows;
      {  // the snapshot baseline (its pool is freed before the replay rows are timed)
        SnapshotPool sp(pool.state_elems(), calls * batch, T, cfg.timing.seed + 31 * T, s);
        const TensorView states = pool.states(sp.states, sp.slots);
        for (int a = 0; a < 2; ++a) {
          pool.set_accepted(a == 0 ? T : 1);
          const Row m = measure(
              ps, [&] { pool.poison(); }, [&](const std::string& w) { pool.check(T, w); },
              [&](cudaStream_t st) {
                for (int r = 0; r < calls; ++r) {
                  Rows rw;
                  rw.slot_ids = device_view(sp.src, static_cast<int64_t>(r) * batch * 4, kI32, {batch});
                  rw.stream = st;
                  const TensorView dst =
                      device_view(sp.dst, static_cast<int64_t>(r) * batch * T * 4, kI32, {batch, T});
                  pool.snapshot(r, st, T, states, rw, dst);
                  cuda::snapshot_select(rw, sp.slots, dst, pool.accepted(r),
                                        device_view(sp.next, static_cast<int64_t>(r) * batch * 4,
                                                    kI32, {batch}));
                }
              },
              1, bm.snapshot(T) * batch, cfg.timing, s,
              fmt::format("{} T {} snapshot", where, T));
          snap_us[a] = m.us;
          nlohmann::json j = row_of(m, pool.family(), sh.name, "snapshot", L);
          j["T"] = T;
          j["acceptance"] = a == 0 ? "all-accept" : "all-reject";
          j["ratio_to_decode_step"] = m.us / dec.us;
          snap_rows.push_back(j);
        }
      }
      for (int a = 0; a < 2; ++a) {
        const int accept = a == 0 ? T : 1;
        pool.set_accepted(accept);
        const std::vector<Cursor> start = pool.set_spec_cursors(scfg);
        const Cycle cyc = cycle_of(scfg, accept, start, L);
        const double bytes = bm.verify(T, cyc.mean_h, cyc.flush_fraction);
        const Row m = measure(
            ps, [&] { pool.poison(); }, [&](const std::string& w) { pool.check(T, w); },
            [&](cudaStream_t st) {
              for (int step = 0; step < L; ++step)
                for (int r = 0; r < calls; ++r) pool.verify(r, st, scfg);
            },
            L, bytes * batch, cfg.timing, s, fmt::format("{} T {} verify", where, T));
        nlohmann::json j = row_of(m, pool.family(), sh.name, "replay", L);
        j["T"] = T;
        j["acceptance"] = a == 0 ? "all-accept" : "all-reject";
        j["ratio_to_decode_step"] = m.us / dec.us;
        j["speedup"] = snap_us[a] / m.us;
        j["baseline"] = "snapshot";
        j["mean_h"] = cyc.mean_h;
        j["flush_fraction"] = cyc.flush_fraction;
        j["commit_in_graph"] = true;
        out.push_back(j);
        if (cfg.timing.on_point)
          cfg.timing.on_point(fmt::format(
              "{} T {} (L {}) {}: verify {:.1f} us ({:.2f}x decode step {:.1f} us), snapshot "
              "{:.1f} us ({:.2f}x)",
              where, T, L, a == 0 ? "all-accept" : "all-reject", m.us, m.us / dec.us, dec.us,
              snap_us[a], snap_us[a] / m.us));
      }
      for (nlohmann::json& j : snap_rows) out.push_back(j);
    }
  }
}

}  // namespace

int verify_ring_length(const VerifyConfig& cfg, int T) { return std::max(cfg.L, 4 * T); }

long verify_graph_count(const VerifyConfig& cfg) {
  return static_cast<long>(cfg.shapes.size() * cfg.batches.size() * (1 + 4 * cfg.Ts.size()));
}

std::vector<nlohmann::json> run_verify(const VerifyConfig& cfg) {
  std::vector<nlohmann::json> out;
  for (const std::string& name : cfg.shapes) {
    const auto m2 = std::find_if(mamba2_shapes().begin(), mamba2_shapes().end(),
                                 [&](const Mamba2Shape& x) { return x.name == name; });
    if (m2 != mamba2_shapes().end()) {
      run_shape<Mamba2Spec>(cfg, *m2, out);
      continue;
    }
    const auto g = std::find_if(gdn_shapes().begin(), gdn_shapes().end(),
                                [&](const GdnShape& x) { return x.name == name; });
    if (g == gdn_shapes().end()) throw BenchError("verify: unknown shape " + name);
    run_shape<GdnSpec>(cfg, *g, out);
  }
  return out;
}

}  // namespace replayssm::bench
