#include "kernel_points.h"

#include <algorithm>
#include <cmath>

namespace replayssm::bench {
namespace {
bool contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}
}  // namespace

int calls_per_graph(double smallest_call_bytes) {
  const double target = 512.0 * (1 << 20);
  const double r = std::ceil(target / smallest_call_bytes);
  return static_cast<int>(std::clamp(r, 2.0, 64.0));
}

std::string state_name(DType t, StateFormat read) {
  // A float16 checkpoint with a read format is an fp16sr mode (fp16sr/fp16sr, fp16sr/nvfp4).
  if (t == DType::kF16 && (read == StateFormat::kFp16Sr || read == StateFormat::kNvfp4))
    return std::string("fp16sr/") + state_format_name(read);
  if (read != StateFormat::kFp32) {
    if (t != DType::kF32 || read == StateFormat::kFp16Sr)
      throw BenchError(std::string("read copy ") + state_format_name(read) + " of a " +
                       dtype_name(t) + " checkpoint is not benchmarked");
    return std::string("fp32/") + state_format_name(read);
  }
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

std::vector<std::pair<int, bool>> ring_lengths(const KernelConfig& cfg, int64_t batch) {
  std::vector<std::pair<int, bool>> out;
  const bool main = contains(cfg.batches, batch);
  if (main) out.emplace_back(cfg.L, true);
  // L = 1 (the conventional kernel behind the replay API): the dispatcher's fallback.
  if (main && cfg.L != 1) out.emplace_back(1, false);
  if (contains(cfg.sweep_batches, batch))
    for (int L : cfg.sweep_L)
      if (!(main && L == cfg.L)) out.emplace_back(L, false);
  return out;
}

std::vector<std::pair<std::string, std::optional<int>>> replay_modes(int L) {
  std::vector<std::pair<std::string, std::optional<int>>> m;
  if (L == 1) return {{"window", std::nullopt}};  // every step a flush of the current token
  m.emplace_back("step", 1);
  if (L - 2 != 1) m.emplace_back("step", L - 2);
  m.emplace_back("flush", L - 1);
  m.emplace_back("window", std::nullopt);
  m.emplace_back("mixed", std::nullopt);
  return m;
}

std::vector<int64_t> all_batches(const KernelConfig& cfg) {
  std::vector<int64_t> b = cfg.batches;
  for (int64_t x : cfg.sweep_batches)
    if (!contains(b, x)) b.push_back(x);
  std::sort(b.begin(), b.end());
  return b;
}

long graphs_per_shape(const KernelConfig& cfg, int nroutes) {
  long n = 0;
  for (int64_t batch : all_batches(cfg)) {
    ++n;  // conventional
    for (const auto& [L, main] : ring_lengths(cfg, batch))
      n += static_cast<long>(replay_modes(L).size()) * (main ? nroutes : 1);
  }
  return n;
}

double run_bytes_per_shape(const KernelConfig& cfg, const StepBytes& bm, int nroutes) {
  const double passes =
      cfg.timing.eager_passes + cfg.timing.warm_replays + cfg.timing.timed_replays;
  double total = 0;
  for (int64_t batch : all_batches(cfg)) {
    const double R = calls_per_graph(static_cast<double>(bm.ordinary(0)) * batch);
    const double per = R * static_cast<double>(batch) * passes;  // sequences moved per graph
    total += per * static_cast<double>(bm.conventional());
    for (const auto& [L, main] : ring_lengths(cfg, batch)) {
      double g = 0;  // bytes of one pass of every mode at this L
      for (const auto& [mode, h] : replay_modes(L)) {
        if (mode == "step") g += static_cast<double>(bm.ordinary(*h));
        else if (mode == "flush") g += static_cast<double>(bm.flush(L));
        else if (mode == "window") g += bm.window(L) * L;
        else g += bm.window(L);
      }
      total += per * g * (main ? nroutes : 1);
    }
  }
  return total;
}

Row measure(const PoolStats& pool, const std::function<void()>& poison,
            const std::function<void(const std::string&)>& check,
            const std::function<void(cudaStream_t)>& enqueue, int steps, double bytes,
            const KernelConfig& cfg, cudaStream_t stream, const std::string& what) {
  poison();
  const ReplayStats st = time_graph(enqueue, stream, cfg.timing);
  check(what);
  const double per = 1e3 / (static_cast<double>(pool.calls) * steps);  // ms per replay -> µs
  Row r;
  r.batch = pool.batch;
  r.state = state_name(pool.state, pool.read);
  r.us = st.median_ms * per;
  r.us_p10 = st.p10_ms * per;
  r.us_p90 = st.p90_ms * per;
  r.bytes = bytes;
  r.gbps = bytes / r.us / 1e3;
  r.pct_copy_bw = cfg.copy_gbps > 0 ? 100.0 * r.gbps / cfg.copy_gbps : 0.0;
  r.calls = pool.calls;
  r.steps = steps;
  r.pool_slots = pool.slots;
  r.replays = cfg.timing.timed_replays;
  if (cfg.on_graph) cfg.on_graph();
  return r;
}

}  // namespace replayssm::bench
