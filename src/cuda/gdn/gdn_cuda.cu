// Host side of the CUDA GDN/KDA decode ops: argument checks, launch plans (the dispatcher), and
// dispatch on dtypes to the instantiated launchers.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>

#include "common/validate.h"
#include "cuda/common/check.cuh"
#include "cuda/common/dtypes.cuh"
#include "cuda/common/memory.h"
#include "cuda/common/plan_env.h"
#include "cuda/common/quant_read.cuh"
#include "cuda/common/split_modes.h"
#include "cuda/common/row_layout.cuh"
#include "cuda/common/rows.h"
#include "cuda/common/zero_slots.h"
#include "cuda/gdn/gdn_cuda.h"
#include "cuda/gdn/launch.h"
#include "cuda/gdn/step_math.cuh"
#include "replayssm/errors.h"

namespace replayssm::cuda::gdn {
namespace {

using validate::kAny;
constexpr DType kF32 = DType::kF32, kF16 = DType::kF16, kBF16 = DType::kBF16;
constexpr int64_t kMaxRing = 64;      // ring rows staged in shared memory
constexpr int64_t kMaxBatch = 65535;  // grid.y
// Static shared memory of the kernels besides the dynamic tile: one mbarrier per warp pass.
constexpr size_t kStaticSmem = kMaxThreads / 32 * kMaxRowsPerThread * sizeof(uint64_t);
// The dispatcher's tile transport until the H200 says which is faster: per-thread cp.async (the
// pattern the Mamba-2 conventional kernel measured at 92-93% of copy).
constexpr int kBulkDefault = 0;

std::string arg(const char* op, const char* name) { return std::string(op) + " " + name; }

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The validated, normalised arguments of a call.
struct Call {
  Tokens in;  // rank-4 views ([batch, 1, ...])
  TensorView y;
  int64_t batch = 0, slots = 0;
  DType in_dtype = kF32, state_dtype = kF32;
  bool kda = false;
};

Call check_call(const Layer& layer, const Cache& cache, const Tokens& in, const Rows& rows,
                const TensorView& y, const char* op) {
  const Dims& d = layer.dims;
  check<ConfigError>(
      d.num_k_heads >= 1 && d.num_v_heads >= 1 && d.head_k_dim >= 1 && d.head_v_dim >= 1, op,
      ": dims H = ", d.num_k_heads, ", HV = ", d.num_v_heads, ", K = ", d.head_k_dim,
      ", V = ", d.head_v_dim, ", expected all >= 1");
  check<ConfigError>(d.num_v_heads % d.num_k_heads == 0, op, ": num_v_heads HV = ", d.num_v_heads,
                     " is not a multiple of num_k_heads H = ", d.num_k_heads);
  check<UnsupportedError>(supported_head_k_dim(d.head_k_dim), op, ": head_k_dim K = ", d.head_k_dim,
                          ", expected 64 or 128 (the K values compiled for CUDA)");
  const int64_t H = d.num_k_heads, HV = d.num_v_heads, K = d.head_k_dim, V = d.head_v_dim;
  Call c;
  c.kda = d.gate == ::replayssm::gdn::Gate::kChannel;
  const Device dev = Device::kCUDA;
  validate::expect(layer.A_log, arg(op, "A_log").c_str(), {HV}, {kF32}, dev);
  if (c.kda)
    validate::expect(layer.dt_bias, arg(op, "dt_bias (KDA)").c_str(), {HV, K}, {kF32}, dev);
  else
    validate::expect(layer.dt_bias, arg(op, "dt_bias (GDN)").c_str(), {HV}, {kF32}, dev);
  check<ConfigError>(std::isfinite(layer.scale), op, ": scale = ", layer.scale,
                     ", expected a finite value (0 = K^-1/2)");

  c.in.q = validate::with_token_axis(in.q, 4);
  validate::expect(c.in.q, arg(op, "q").c_str(), {kAny, 1, H, K}, {kF32, kBF16}, dev);
  c.batch = c.in.q.shape[0];
  c.in_dtype = c.in.q.dtype;
  const DType t = c.in_dtype;
  c.in.k = validate::with_token_axis(in.k, 4);
  validate::expect(c.in.k, arg(op, "k").c_str(), {c.batch, 1, H, K}, {t}, dev);
  c.in.v = validate::with_token_axis(in.v, 4);
  validate::expect(c.in.v, arg(op, "v").c_str(), {c.batch, 1, HV, V}, {t}, dev);
  if (c.kda) {
    c.in.a = validate::with_token_axis(in.a, 4);
    validate::expect(c.in.a, arg(op, "a (KDA)").c_str(), {c.batch, 1, HV, K}, {t}, dev);
  } else {
    c.in.a = validate::with_token_axis(in.a, 3);
    validate::expect(c.in.a, arg(op, "a (GDN)").c_str(), {c.batch, 1, HV}, {t}, dev);
  }
  c.in.b = validate::with_token_axis(in.b, 3);
  validate::expect(c.in.b, arg(op, "b").c_str(), {c.batch, 1, HV}, {t}, dev);
  c.y = validate::with_token_axis(y, 4);
  validate::expect(c.y, arg(op, "y").c_str(), {c.batch, 1, HV, V}, {t}, dev);

  validate::expect(cache.state, arg(op, "state").c_str(), {kAny, HV, V, K}, {kF32, kF16, kBF16},
                   dev);
  c.slots = cache.state.shape[0];
  c.state_dtype = cache.state.dtype;
  check<UnsupportedError>(c.batch <= kMaxBatch, op, ": batch ", c.batch,
                          ", expected <= ", kMaxBatch);
  check_aligned(cache.state, op, "state");
  check_aligned(c.in.q, op, "q");
  check_aligned(c.in.k, op, "k");
  if (c.kda) {
    check_aligned(c.in.a, op, "a (KDA)");
    check_aligned(layer.dt_bias, op, "dt_bias (KDA)");
  }
  check_rows(rows, c.batch, c.slots, 0, op);
  return c;
}

void check_ring(const Layer& layer, const Cache& cache, const RingCursors& cursors, const Call& c,
                const char* op) {
  const Dims& d = layer.dims;
  const Device dev = Device::kCUDA;
  validate::cursors(cursors, c.slots, RingMode::kDecode, dev, op);
  const int64_t R = cursors.config.rows();
  check<UnsupportedError>(R <= kMaxRing, op, ": ring length L = ", cursors.config.L,
                          ", expected L <= ", kMaxRing, " on CUDA");
  validate::expect(cache.ring_u, arg(op, "ring_u").c_str(),
                   {c.slots, d.num_v_heads, R, d.head_v_dim}, {kF32}, dev);
  validate::expect(cache.ring_k, arg(op, "ring_k").c_str(),
                   {c.slots, d.num_k_heads, R, d.head_k_dim}, {kF32}, dev);
  if (c.kda)
    validate::expect(cache.ring_g, arg(op, "ring_g (KDA)").c_str(),
                     {c.slots, d.num_v_heads, R, d.head_k_dim}, {kF32}, dev);
  else
    validate::expect(cache.ring_g, arg(op, "ring_g (GDN)").c_str(), {c.slots, d.num_v_heads, R},
                     {kF32}, dev);
  check_aligned(cache.ring_u, op, "ring_u");
  check_aligned(cache.ring_k, op, "ring_k");
  check_aligned(cache.ring_g, op, "ring_g");
}

StepParams base_params(const Layer& layer, const Cache& cache, const Call& c, const Rows& rows) {
  const Dims& d = layer.dims;
  StepParams p;
  p.H = static_cast<int32_t>(d.num_k_heads);
  p.HV = static_cast<int32_t>(d.num_v_heads);
  p.K = static_cast<int32_t>(d.head_k_dim);
  p.V = static_cast<int32_t>(d.head_v_dim);
  p.group = static_cast<int32_t>(d.num_v_heads / d.num_k_heads);
  p.slots = static_cast<int32_t>(std::min<int64_t>(c.slots, INT32_MAX));
  p.batch = static_cast<int32_t>(c.batch);
  p.q = c.in.q.data;
  p.k = c.in.k.data;
  p.v = c.in.v.data;
  p.a = c.in.a.data;
  p.b = c.in.b.data;
  p.A_log = layer.A_log.ptr<float>();
  p.dt_bias = layer.dt_bias.ptr<float>();
  p.scale = layer.scale != 0.0f ? layer.scale : 1.0f / std::sqrt(static_cast<float>(d.head_k_dim));
  p.state = cache.state.data;
  p.y = c.y.data;
  p.slot_ids = rows.slot_ids.ptr<int32_t>();
  p.beta_bf16 = layer.beta_bf16;
  if (cache.mode.uses_sr()) {  // fp16sr/fp16sr: the float16 checkpoint's writes round stochastically
    p.sr.seeds = cache.sr.seeds.ptr<int64_t>();
    p.sr.steps = cache.sr.steps.ptr<int32_t>();
  }
  return p;
}

/// Bytes of state a step of `batch` rows touches.
double step_state_bytes(const Dims& d, int64_t batch, DType state) {
  return static_cast<double>(batch) * d.num_v_heads * d.head_v_dim * d.head_k_dim *
         static_cast<double>(dtype_size(state));
}

/// Below a few tens of MB of state a step is latency-bound (the whole GPU moves that in ~10 µs),
/// above it bandwidth-bound.
bool latency_bound(const Dims& d, int64_t batch, DType state) {
  return step_state_bytes(d, batch, state) <= 32.0 * (1 << 20);
}

/// Rows one warp covers with rpt rows per thread.
int64_t warp_rows(const Dims& d, DType state, int64_t rpt) {
  return HostRowLayout::of(d.head_k_dim, dtype_size(state), kMaxLanes).rows_per_warp * rpt;
}

/// Rows per block: the fewest splits of V that fit the block-size cap and give at least
/// `min_blocks` blocks in all, while a block keeps >= min_rows rows (rounded up to a multiple of
/// 4, which keeps the replay's ring u staging in 16-byte words).
int rows_per_block(const Dims& d, DType state, int64_t rpt, int64_t blocks_per_split,
                   int64_t min_blocks, int64_t min_rows) {
  const int64_t V = d.head_v_dim, unit = warp_rows(d, state, rpt);
  const int64_t max_rows = kMaxThreads / 32 * unit;
  int64_t nsplit = cdiv(V, max_rows);
  while (blocks_per_split * nsplit < min_blocks && cdiv(V, nsplit + 1) >= std::max(unit, min_rows))
    ++nsplit;
  const int64_t rows = std::min(cdiv(cdiv(V, nsplit), 4) * 4, max_rows);
  return static_cast<int>(std::min(rows, V));
}

/// Rows per block for bandwidth-bound steps: V split evenly into blocks of at most `target` rows
/// (at least one warp's rows), rounded up to a multiple of 4.
int even_rows(const Dims& d, DType state, int64_t rpt, int64_t target) {
  const int64_t V = d.head_v_dim;
  const int64_t cap = std::max(target, warp_rows(d, state, rpt));
  const int64_t rows = cdiv(cdiv(V, cdiv(V, cap)), 4) * 4;
  return static_cast<int>(std::min(rows, V));
}

Plan resolve(const Plan& forced, const Plan& autop, const Dims& d, DType state, bool replay,
             const char* op) {
  Plan p = forced;
  if (p.route == Route::kAuto) p.route = autop.route;
  if (p.prefetch_ring < 0) p.prefetch_ring = autop.prefetch_ring;
  if (p.bulk_copy < 0) p.bulk_copy = autop.bulk_copy;
  if (p.rows_per_thread == 0) p.rows_per_thread = autop.rows_per_thread;
  check<ConfigError>(p.rows_per_thread >= 1 && p.rows_per_thread <= kMaxRowsPerThread, op,
                     ": plan rows_per_thread = ", p.rows_per_thread, ", expected 1..",
                     kMaxRowsPerThread);
  if (p.rows_per_block == 0)
    p.rows_per_block =
        p.rows_per_thread == autop.rows_per_thread
            ? autop.rows_per_block
            : std::min<int64_t>(d.head_v_dim,
                                kMaxThreads / 32 * warp_rows(d, state, p.rows_per_thread));
  check<ConfigError>(p.rows_per_block >= 1 && p.rows_per_block <= d.head_v_dim, op,
                     ": plan rows_per_block = ", p.rows_per_block, ", expected 1..", d.head_v_dim);
  const int64_t unit = warp_rows(d, state, p.rows_per_thread);
  const int64_t threads = cdiv(p.rows_per_block, unit) * 32;
  check<ConfigError>(threads <= kMaxThreads, op, ": plan rows_per_block = ", p.rows_per_block,
                     " with rows_per_thread = ", p.rows_per_thread, " needs ", threads,
                     " threads, expected <= ", kMaxThreads, " (at most ", kMaxThreads / 32 * unit,
                     " rows per block)");
  if (!replay) {
    p.route = Route::kAuto, p.prefetch_ring = 0, p.kernel = 0;
    return p;
  }
  // The group kernel unless the caller forced a row split it does not have.
  if (p.kernel == 0)
    p.kernel = forced.rows_per_block == 0 &&
                       (forced.rows_per_thread == 0 || forced.rows_per_thread == 4 ||
                        forced.rows_per_thread == 8)
                   ? autop.kernel
                   : 1;
  if (p.heads_per_block == 0) p.heads_per_block = autop.heads_per_block;
  if (p.units_per_head == 0) p.units_per_head = autop.units_per_head;
  if (p.stages == 0) p.stages = autop.stages;
  if (p.flush_kernel < 0) p.flush_kernel = std::max(autop.flush_kernel, 0);
  check<ConfigError>(p.flush_kernel == 0 || p.flush_kernel == 1, op, ": plan flush_kernel = ",
                     p.flush_kernel, ", expected -1 (auto), 0 or 1");
  if (p.early_exit < 0) p.early_exit = std::max(autop.early_exit, 0);
  check<ConfigError>(p.early_exit == 0 || p.early_exit == 1, op, ": plan early_exit = ",
                     p.early_exit, ", expected -1 (auto), 0 or 1");
  if (p.overlap < 0) p.overlap = std::max(autop.overlap, 0);
  check<ConfigError>(p.overlap == 0 || p.overlap == 1, op, ": plan overlap = ", p.overlap,
                     ", expected -1 (auto), 0 or 1");
  if (p.flush_threads == 0 || p.flush_threads == -1)
    p.flush_threads = autop.flush_threads > 0 ? autop.flush_threads : kFlushThreads;
  check<ConfigError>(p.flush_threads == 64 || p.flush_threads == 128 || p.flush_threads == 256,
                     op, ": plan flush_threads = ", p.flush_threads,
                     ", expected 0 or -1 (auto), 64, 128 or 256");
  if (p.flush_pipeline < 0) p.flush_pipeline = std::max(autop.flush_pipeline, 0);
  check<ConfigError>(p.flush_pipeline == 0 || p.flush_pipeline == 1, op,
                     ": plan flush_pipeline = ", p.flush_pipeline, ", expected -1 (auto), 0 or 1");
  check<ConfigError>(p.kernel == 1 || p.kernel == 2, op, ": plan kernel = ", p.kernel,
                     ", expected 1 (per-block) or 2 (group)");
  if (p.kernel == 2) {
    const int64_t group = d.num_v_heads / d.num_k_heads;
    check<ConfigError>(d.head_v_dim % 4 == 0, op, ": the group kernel needs head_v_dim % 4 == 0, "
                       "got V = ", d.head_v_dim, " (use kernel 1)");
    check<ConfigError>(p.rows_per_thread == 4 || p.rows_per_thread == 8, op,
                       ": group kernel rows_per_thread = ", p.rows_per_thread, ", expected 4 or 8");
    check<ConfigError>(p.heads_per_block >= 1 && group % p.heads_per_block == 0, op,
                       ": group kernel heads_per_block = ", p.heads_per_block,
                       ", expected a divisor of HV / H = ", group);
    check<ConfigError>(d.gate != ::replayssm::gdn::Gate::kChannel || p.heads_per_block == 1, op,
                       ": group kernel heads_per_block = ", p.heads_per_block,
                       ", expected 1 for KDA");
    check<ConfigError>(p.units_per_head >= 1, op, ": group kernel units_per_head = ",
                       p.units_per_head, ", expected >= 1");
    check<ConfigError>(p.stages >= 1 && p.stages <= 4, op, ": group kernel stages = ", p.stages,
                       ", expected 1..4");
  }
  return p;
}

/// Rows of one group-kernel unit: the stream warps' rows per pass x rows per thread.
int64_t group_unit_rows(const Dims& d, DType state, int64_t rpt) {
  return kGroupStreamWarps * warp_rows(d, state, rpt);
}

/// The group kernel's shared memory; `folds`: whether a row of the launch may fold (group_folds),
/// the most it needs. `state` is what the stages hold (kU8: a quantised read copy, whose lanes
/// take 16-element chunks), `bits` its bits per element where that is not the dtype's (4: NVFP4).
GroupSmem group_smem(const Dims& d, const Plan& p, int64_t R, DType state, bool folds = true,
                     int64_t bits = 0) {
  const bool kda = d.gate == ::replayssm::gdn::Gate::kChannel;
  return GroupSmem(R, d.head_k_dim, kda ? d.head_k_dim : 1,
                   group_unit_rows(d, state, p.rows_per_thread),
                   bits > 0 ? bits : 8 * dtype_size(state), p.heads_per_block, p.units_per_head,
                   p.stages, folds || kda);
}

/// Tuning runs only: RSSM_GDN_REPLAY_PLAN="kernel=2,rpt=4,hpb=2,uph=4,stages=3,prefetch=0,
/// flush=0,exit=1,pdl=1,fthreads=128,fpipe=0" (any subset) replaces those fields of the dispatcher's
/// choice for every replay step of the process.
void override_replay_plan(Plan& p) {
  for_each_plan_override("RSSM_GDN_REPLAY_PLAN", [&](const std::string& key, int v) {
    if (key == "kernel") p.kernel = v;
    if (key == "rpt") p.rows_per_thread = v;
    if (key == "hpb") p.heads_per_block = v;
    if (key == "uph") p.units_per_head = v;
    if (key == "stages") p.stages = v;
    if (key == "prefetch") p.prefetch_ring = v;
    if (key == "flush") p.flush_kernel = v;
    if (key == "exit") p.early_exit = v;
    if (key == "pdl") p.overlap = v;
    if (key == "fthreads") p.flush_threads = v;  // flush_threads
    if (key == "fpipe") p.flush_pipeline = v;
  });
}

/// Tuning runs only: RSSM_GDN_CONVENTIONAL_PLAN="rpt=8,rows=64,bulk=1" (any subset) replaces
/// those fields of the dispatcher's choice for every conventional step of the process.
void override_conventional_plan(Plan& p) {
  for_each_plan_override("RSSM_GDN_CONVENTIONAL_PLAN", [&](const std::string& key, int v) {
    if (key == "rpt") p.rows_per_thread = v;
    if (key == "rows") p.rows_per_block = v;
    if (key == "bulk") p.bulk_copy = v;
  });
}

LaunchShape launch_shape(const Dims& d, const Plan& plan, DType state, bool kda, int64_t batch,
                         size_t smem) {
  LaunchShape ls;
  const int64_t nsplit = cdiv(d.head_v_dim, plan.rows_per_block);
  ls.grid = dim3(static_cast<unsigned>(d.num_v_heads * nsplit), static_cast<unsigned>(batch));
  ls.threads =
      static_cast<int>(cdiv(plan.rows_per_block, warp_rows(d, state, plan.rows_per_thread)) * 32);
  ls.smem = smem;
  ls.K = static_cast<int>(d.head_k_dim);
  ls.kda = kda;
  return ls;
}

/// Dynamic `bytes` plus the static barriers fit the device's per-block shared memory.
void check_smem(size_t bytes, const char* op) {
  int dev = 0, limit = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
             "cudaDeviceGetAttribute (shared memory per block)");
  bytes += kStaticSmem;
  check<UnsupportedError>(bytes <= static_cast<size_t>(limit), op, ": the plan needs ", bytes,
                          " bytes of shared memory per block, expected <= ", limit,
                          " (fewer rows_per_block or a shorter ring)");
}

template <class TIn>
void dispatch_conventional(DType state, const StepParams& p, const LaunchShape& ls,
                           cudaStream_t s) {
  if (state == kF32) return launch_conventional<TIn, float>(p, ls, s);
  if (state == kF16) return launch_conventional<TIn, f16>(p, ls, s);
  launch_conventional<TIn, bf16>(p, ls, s);
}

template <class TIn>
void dispatch_replay(DType state, const StepParams& p, const LaunchShape& ls, cudaStream_t s) {
  if (state == kF32) return launch_replay<TIn, float>(p, ls, s);
  if (state == kF16) return launch_replay<TIn, f16>(p, ls, s);
  launch_replay<TIn, bf16>(p, ls, s);
}

/// The ordinary launch over a quantised read copy (NVFP4 or FP8 codes).
template <class TIn>
void dispatch_quant(bool nvfp4, const StepParams& p, const LaunchShape& ls, cudaStream_t s) {
  if (nvfp4) return launch_replay<TIn, nvfp4x2>(p, ls, s);
  launch_replay<TIn, e4m3>(p, ls, s);
}

}  // namespace

const char* route_name(Route r) {
  switch (r) {
    case Route::kAuto:
      return "auto";
    case Route::kOutputOnly:
      return "output-only";
    case Route::kStateAndOutput:
      return "state-and-output";
  }
  return "?";
}

Plan plan_conventional(const Dims& d, int64_t batch, DType state) {
  Plan p;
  batch = std::max<int64_t>(batch, 1);
  if (latency_bound(d, batch, state)) {
    // Small batches: small blocks, few rows per thread, so that every row's copy is in flight at
    // once and a block's serial part after it lands stays short (H200, same-call A/B against 2
    // rows per thread over ~4 blocks per SM, bench/NOTES.md "Small batches"): above 4 MiB of
    // state 4 rows per thread in blocks of 32 (GDN batch 2-16 -8 to -16%, KDA batch 4-16 -14 to
    // -21%); GDN above 2 MiB 2 rows per thread in blocks of 32 (bench/NOTES_gdn.md "Session 22":
    // Qwen3.5-4B batch 2 4.99 -> 4.63 µs, Qwen3.5-122B batch 1 4.97 -> 4.69), up to 2 MiB 1 row
    // per thread in blocks of 16 (Qwen3.5-4B batch 1 3.47 µs, 2 rows 3.72), while KDA keeps 2
    // rows per thread (1 was 3-41% slower there).
    const double bytes = step_state_bytes(d, batch, state);
    if (bytes > 4.0 * (1 << 20)) {
      p.rows_per_thread = 4;
      p.rows_per_block = even_rows(d, state, 4, 32);
    } else if (d.gate != ::replayssm::gdn::Gate::kChannel && bytes > 2.0 * (1 << 20)) {
      p.rows_per_thread = 2;
      p.rows_per_block = even_rows(d, state, 2, 32);
    } else if (d.gate != ::replayssm::gdn::Gate::kChannel) {
      p.rows_per_thread = 1;
      p.rows_per_block = even_rows(d, state, 1, 16);
    } else {
      p.rows_per_thread = 2;
      p.rows_per_block =
          rows_per_block(d, state, 2, batch * d.num_v_heads, 4 * device_sms(), /*min_rows=*/8);
    }
  } else {
    // Bandwidth-bound: 8 rows (8 x 2 x 16 bytes of fp32 K = 128 state) in flight per thread;
    // blocks of 64 rows (32 KB fp32 tiles, up to 7 blocks and 224 KB in flight per SM) keep the
    // tail of the grid short.
    p.rows_per_thread = 8;
    p.rows_per_block = even_rows(d, state, 8, 64);
  }
  p.prefetch_ring = 0;
  p.bulk_copy = kBulkDefault;
  return p;
}

Plan plan_replay(const Dims& d, int64_t batch, int32_t L, DType state) {
  Plan p;
  batch = std::max<int64_t>(batch, 1);
  // Output-only: the state-and-output route folds every record into every state element on
  // every ordinary step (h K multiply-adds per element against 2), kept as the checked
  // alternative.
  p.route = Route::kOutputOnly;
  (void)L;
  if (latency_bound(d, batch, state)) {
    // Latency-bound: stage the whole ring with the checkpoint (no wait for the cursor) and split
    // V, but less finely than the conventional step: every block of a head stages the key head's
    // records of k^ to form its per-record scalars, so blocks keep >= 32 rows.
    p.prefetch_ring = 1;
    p.rows_per_thread = 2;
    p.rows_per_block =
        rows_per_block(d, state, 2, batch * d.num_v_heads, device_sms(), /*min_rows=*/32);
  } else {
    p.prefetch_ring = 0;
    p.rows_per_thread = 8;
    p.rows_per_block = even_rows(d, state, 8, 64);
  }
  p.bulk_copy = kBulkDefault;
  if (d.head_v_dim % 4 != 0) {  // the group kernel copies ring u rows in 16-byte words
    p.kernel = 1;
    return p;
  }
  // Group kernel. Latency-bound: one value head and one 4-row-per-thread unit per block (the most
  // blocks), the whole ring prefetched. Bandwidth-bound: every value head of the key head (up to
  // 4) per block, so that the chain is paid once per ~8 units, two units in flight (the rows per
  // thread and V per block below; shrunk until the shared memory fits two blocks per SM).
  p.kernel = 2;
  const bool kda = d.gate == ::replayssm::gdn::Gate::kChannel;
  // Flush rows fold in a launch of their own (flush.cuh): with mixed flush phases (the
  // serving case) as fast or faster at every batch measured (Qwen3.5-4B 64 / 256 / 512: 1.15 /
  // 1.31 / 1.38x against 1.04 / 1.29 / 1.36x in one launch; window within 2%; H200, b5f5edb,
  // bench/NOTES_gdn.md); KDA too (bench/NOTES_gdn.md "Session 17: KDA's ordinary step").
  p.flush_kernel = 1;
  // The ordinary launch waits for is_flush before streaming a flush row it would drop (as for
  // Mamba-2: bench/NOTES_gdn.md "Early exit").
  p.early_exit = 1;
  // The flush launch starts while the ordinary launch's last wave runs (programmatic dependent
  // launch; as for Mamba-2: bench/NOTES.md "FlashInfer side by side, and the flush launch
  // overlapping the ordinary one").
  p.overlap = 1;
  p.flush_threads = kFlushThreads;
  // Where it applies, the flush launch is the pipelined kernel (flush_pipe.cuh; H200, dbc30e3:
  // Qwen3.5-4B batch 256 flush 410 -> 332 µs, window 1.71 -> 1.76x; bench/NOTES_gdn.md "Session
  // 19"), once an all-flush step has >= 6 items per block of it (two per SM): with fewer its
  // producers have nothing to run ahead on, and its empty launch on ordinary steps costs ~1 µs
  // more than flush.cuh's (mixed step at Qwen3.5-4B batch 8 / 16 12.2 -> 14.6 / 19.2 -> 20.1 µs,
  // batch 32 / 64 30.1 -> 29.4 / 50.3 -> 49.5 µs; aafb793's table against dbc30e3's).
  const int64_t flush_rows = kFlushThreads / 32 * warp_rows(d, state, kFlushRowsPerThread);
  const int64_t flush_items = batch * d.num_v_heads * cdiv(d.head_v_dim, flush_rows);
  p.flush_pipeline = flush_items >= 6 * 2 * device_sms() ? 1 : 0;
  const int64_t group = d.num_v_heads / d.num_k_heads;
  if (latency_bound(d, batch, state)) {
    p.rows_per_thread = 4, p.heads_per_block = 1, p.units_per_head = 1, p.stages = 1;
    // GDN: up to four 32-row units (K = V = 128: a whole value head) per block, two stages,
    // the ring read after the cursor, where that still gives a block per SM: a block stages
    // the key head's records once for 128 rows instead of 32 (H200, bench/NOTES_gdn.md
    // "Small-batch ordinary step": fp32 ordinary step Qwen3.5-4B batch 8 / 16 23.6 / 43.0 ->
    // 12.5 / 20.4 µs, Qwen3.5-122B batch 8 42.7 -> 20.4 µs). The 16-bit read copies too, which
    // stay latency-bound up to twice the batch (session 18: at batch 32 the one-unit plan read
    // the bf16 copy in 54.6 µs, the fp32 checkpoint's plan 22.9 µs).
    const int64_t units = cdiv(d.head_v_dim, group_unit_rows(d, state, 4));
    const int64_t uph = std::min<int64_t>(4, units);
    if (!kda && batch * d.num_v_heads * cdiv(units, uph) >= device_sms()) {
      p.units_per_head = static_cast<int>(uph), p.stages = 2, p.prefetch_ring = 0;
    }
    return p;
  }
  p.stages = 2;
  int hpb = 1;
  for (int c = 4; c >= 1; --c)
    if (group % c == 0) {
      hpb = c;
      break;
    }
  p.heads_per_block = kda ? 1 : hpb;
  // Blocks of <= 8 units of 4 rows per thread (16 KB fp32 units). Where the key head's value
  // heads have more, 8 rows per thread and whole V per block (the chain paid once per value head;
  // H200, 7241bec: Qwen3.5-4B batch 256 window 192 µs with 8 x 16 KB against 211 µs with 4 x 32
  // KB, Qwen3.5-122B 381 µs with 8 x 32 KB against 435 µs with 16 x 16 KB); but an ordinary launch
  // without the fold (flush_kernel 1) keeps 4 rows and splits V over blocks of 8 units wherever
  // those blocks fill three per SM and their shared memory lets three or more stay resident
  // (H200, df46788, forced plan: Qwen3.5-122B batch 256 window 369 -> 323 µs, batch 32 54 -> 48
  // µs; at batch 8, which the latency-bound plan above serves in 17 µs, it would take 25 µs).
  p.rows_per_thread = 4;
  const int64_t units4 = cdiv(d.head_v_dim, group_unit_rows(d, state, 4));
  int64_t uph = units4;  // whole V per block
  if (p.heads_per_block * units4 > 8) {
    Plan q = p;
    q.units_per_head = static_cast<int>(std::max<int64_t>(1, 8 / p.heads_per_block));
    const int64_t blocks =
        batch * d.num_k_heads * (group / p.heads_per_block) * cdiv(units4, q.units_per_head);
    const int64_t smem = group_smem(d, q, L, state, /*folds=*/false).total * 4;
    if (p.flush_kernel == 1 && blocks >= 3 * device_sms() && blocks_per_sm_by_smem(smem) >= 3) {
      uph = q.units_per_head;
    } else {
      p.rows_per_thread = 8;
      uph = cdiv(d.head_v_dim, group_unit_rows(d, state, 8));
    }
  }
  p.units_per_head = static_cast<int>(uph);
  constexpr int64_t kTwoPerSm = 110 * 1024;
  while (group_smem(d, p, L, state).total * 4 > kTwoPerSm &&
         (p.heads_per_block > 1 || p.units_per_head > 1)) {
    if (p.heads_per_block > 1) {
      int c = p.heads_per_block - 1;
      while (group % c != 0) --c;
      p.heads_per_block = c;
    } else {
      p.units_per_head = (p.units_per_head + 1) / 2;
    }
  }
  return p;
}

void conventional_step(const Layer& layer, Cache& cache, const Tokens& in, const Rows& rows,
                       TensorView y, const Plan& forced) {
  const char* op = "gdn.conventional_step (cuda)";
  const Call c = check_call(layer, cache, in, rows, y, op);
  const Dims& d = layer.dims;
  Plan autop = plan_conventional(d, c.batch, c.state_dtype);
  override_conventional_plan(autop);
  const Plan plan = resolve(forced, autop, d, c.state_dtype, false, op);
  const size_t smem =
      conventional_smem_bytes(plan.rows_per_block, d.head_k_dim, dtype_size(c.state_dtype));
  check_smem(smem, op);
  if (c.batch == 0) return;
  StepParams p = base_params(layer, cache, c, rows);
  p.rows_per_block = plan.rows_per_block;
  p.nsplit = static_cast<int32_t>(cdiv(d.head_v_dim, plan.rows_per_block));
  p.rows_per_thread = plan.rows_per_thread;
  p.bulk_copy = plan.bulk_copy != 0;
  const LaunchShape ls = launch_shape(d, plan, c.state_dtype, c.kda, c.batch, smem);
  const auto stream = static_cast<cudaStream_t>(rows.stream);
  if (c.in_dtype == kF32)
    dispatch_conventional<float>(c.state_dtype, p, ls, stream);
  else
    dispatch_conventional<bf16>(c.state_dtype, p, ls, stream);
}

namespace {

/// One replay launch over `cache.state` (the checkpoint, or a split mode's read copy): every row,
/// or (only = 1) the ordinary rows, or (only = 2) the flush rows, which then write `copy`; split
/// modes pass ring_v / ring_beta (ordinary rows append, flush rows recompute u from them). With
/// `quant` (only = 1, cache.state the checkpoint: fp32, or fp16sr/nvfp4's float16 one), the
/// ordinary rows read that quantised read
/// copy instead (NVFP4 when `nvfp4`, else FP8); a forced state-and-output route is then a
/// ConfigError.
void replay_launch(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
                   const Rows& rows, TensorView y, const Plan& forced, int8_t only,
                   const TensorView& copy, const StateBuffer* quant = nullptr,
                   bool nvfp4 = false) {
  const char* op = "gdn.replay_step (cuda)";
  const Call c = check_call(layer, cache, in, rows, y, op);
  check_ring(layer, cache, cursors, c, op);
  // L = 1 is the conventional step (every step folds only the current token): run its kernel.
  if (cursors.config.L == 1) return conventional_step(layer, cache, in, rows, y, Plan{});
  const Dims& d = layer.dims;
  // What the ordinary rows read: kU8 stands for a quantised copy (lanes of 16-element chunks).
  const DType sdt = quant ? DType::kU8 : c.state_dtype;
  const int64_t bits = quant ? (nvfp4 ? 4 : 8) : 8 * dtype_size(c.state_dtype);
  const Plan want = quant ? quant_read_plan(forced, op) : forced;
  Plan autop = plan_replay(d, c.batch, cursors.config.L, sdt);
  override_replay_plan(autop);
  const Plan plan = resolve(want, autop, d, sdt, true, op);
  // The checkpoint a split mode's flush call reads: float32, but the float16 one of fp16sr/nvfp4
  // (a quantised mode's cache.state is its checkpoint; a 16-bit mode's ordinary call sees its copy).
  const DType flush_dtype = only == 1 && !quant ? kF32 : c.state_dtype;
  if (only == 1) {  // a split mode: the flush call's plan, checked up front
    Plan fauto = plan_replay(d, c.batch, cursors.config.L, flush_dtype);
    override_replay_plan(fauto);
    resolve(forced, fauto, d, flush_dtype, true, op);
  }
  const int64_t R = cursors.config.rows();
  const bool group = plan.kernel == 2;
  // Split modes keep every record's v and beta in the ring (gdn.h; fp16sr/fp16sr too, whose
  // flush needs no exact u but whose ring is the same as every split mode's).
  const bool ring_vb = only != 0 || is_sr16(cache.mode);
  check<UnsupportedError>(!ring_vb || group, op, ": split state modes run on the group kernel, "
                          "but the plan selects kernel ", plan.kernel);
  const ReplaySmem sm(R, d.head_k_dim, c.kda ? d.head_k_dim : 1, plan.rows_per_block,
                      dtype_size(c.state_dtype));
  const size_t smem = static_cast<size_t>(
      (group ? group_smem(d, plan, R, sdt, true, bits).total : sm.total) * sizeof(float));
  if (only != 2) check_smem(smem, op);  // (a split flush call launches only the flush kernel)
  if (c.batch == 0) return;
  StepParams p = base_params(layer, cache, c, rows);
  p.R = static_cast<int32_t>(R);
  p.rows_per_block = plan.rows_per_block;
  p.nsplit = static_cast<int32_t>(cdiv(d.head_v_dim, plan.rows_per_block));
  p.rows_per_thread = plan.rows_per_thread;
  p.ring_u = cache.ring_u.ptr<float>();
  p.ring_k = cache.ring_k.ptr<float>();
  p.ring_g = cache.ring_g.ptr<float>();
  p.only = only;
  p.copy = copy.data;
  p.copy_f16 = copy.dtype == kF16;
  if (ring_vb) {
    p.ring_v = cache.ring_v.ptr<float>();
    p.ring_beta = cache.ring_beta.ptr<float>();
  }
  if (quant) {
    p.state = quant->values.data;
    p.read_scales = nvfp4 ? quant->scales.blocks.data : quant->scales.rows.data;
    p.read_global = nvfp4 ? quant->scales.global.ptr<float>() : nullptr;
  }
  p.origin = cursors.origin.ptr<int32_t>();
  p.hist = cursors.h.ptr<int32_t>();
  p.is_flush = cursors.is_flush.ptr<int8_t>();
  p.state_route = plan.route == Route::kStateAndOutput;
  p.prefetch_ring = plan.prefetch_ring != 0;
  p.bulk_copy = plan.bulk_copy != 0;
  LaunchShape ls = launch_shape(d, plan, sdt, c.kda, c.batch, smem);
  if (group) {
    const int64_t U = group_unit_rows(d, sdt, plan.rows_per_thread);
    p.group_kernel = true;
    p.heads_per_block = plan.heads_per_block;
    p.units_per_head = plan.units_per_head;
    p.stages = plan.stages;
    p.nvc = static_cast<int32_t>(d.num_v_heads / d.num_k_heads / plan.heads_per_block);
    p.nru = static_cast<int32_t>(cdiv(cdiv(d.head_v_dim, U), plan.units_per_head));
    ls.grid = dim3(static_cast<unsigned>(d.num_k_heads * p.nvc * p.nru),
                   static_cast<unsigned>(c.batch));
    ls.threads = kGroupThreads;
    ls.rpt = plan.rows_per_thread;
  }
  const auto stream = static_cast<cudaStream_t>(rows.stream);
  auto launch = [&](const StepParams& q, const LaunchShape& s0) {
    LaunchShape s = s0;
    if (q.group_kernel)  // a launch that folds no row stages no ring k^ (GDN)
      s.smem =
          static_cast<size_t>(group_smem(d, plan, R, sdt, group_folds(q), bits).total) *
          sizeof(float);
    if (quant && q.only == 1) {  // (the flush launch reads the checkpoint)
      if (c.in_dtype == kF32)
        dispatch_quant<float>(nvfp4, q, s, stream);
      else
        dispatch_quant<bf16>(nvfp4, q, s, stream);
    } else if (c.in_dtype == kF32)
      dispatch_replay<float>(c.state_dtype, q, s, stream);
    else
      dispatch_replay<bf16>(c.state_dtype, q, s, stream);
  };
  // Flush rows in a launch of their own (flush.cuh) after the ordinary rows' launch. Split modes
  // make the two launches in two calls (run_split16, run_split_quant): only = 1 over the read
  // copy, only = 2 over the checkpoint (fp32, or fp16sr/nvfp4's float16 one), whose flush
  // recomputes u from the ring's v and beta (flush.cuh, EXACT).
  // The flush launch's shape, checked before anything is enqueued (split modes: also in the
  // ordinary call, for the flush call that follows it).
  StepParams f = p;
  f.only = 2;
  f.exact_u = only != 0;
  f.early_exit = false;
  f.group_kernel = false;
  f.rows_per_thread = kFlushRowsPerThread;
  const int64_t unit = warp_rows(d, flush_dtype, kFlushRowsPerThread);
  f.nsplit = static_cast<int32_t>(cdiv(d.head_v_dim, plan.flush_threads / 32 * unit));
  f.rows_per_block = static_cast<int32_t>(cdiv(cdiv(d.head_v_dim, f.nsplit), unit) * unit);
  f.nsplit = static_cast<int32_t>(cdiv(d.head_v_dim, f.rows_per_block));
  LaunchShape fs = ls;
  fs.flush = true;
  // The pipelined flush kernel (flush_pipe.cuh): scalar gate, default state mode (split modes
  // recompute u: flush.cuh's EXACT), a ring whose records fit a producer warp's lanes, V rows in
  // 16-byte runs (its bulk copies of ring u rows).
  f.flush_pipe = plan.flush_pipeline == 1 && !c.kda && only == 0 && R <= kFlushPipeMaxR &&
                 f.rows_per_block <= kFlushPipeMaxRows && d.head_v_dim % 4 == 0;
  // Only when the ordinary launch's flush-row blocks leave before reading anything: the two
  // launches then touch disjoint rows and slots.
  fs.overlap = plan.early_exit == 1 && plan.overlap == 1;
  fs.threads = static_cast<int>(cdiv(f.rows_per_block, unit) * 32);
  fs.smem = static_cast<size_t>(
      FlushSmem(static_cast<int>(R), static_cast<int>(d.head_k_dim), f.rows_per_block,
                c.kda ? static_cast<int>(d.head_k_dim) : 1, only != 0).total *
      sizeof(float));
  if (f.flush_pipe) {  // producer warps beside the consumers
    const size_t smem = static_cast<size_t>(FlushPipeSmem(static_cast<int>(R),
                                                          static_cast<int>(d.head_k_dim),
                                                          f.rows_per_block,
                                                          static_cast<int>(dtype_size(c.state_dtype)))
                                                .total) *
                        sizeof(float);
    // Two blocks per SM or flush.cuh (at one the pipeline holds half the items in flight).
    f.flush_pipe = blocks_per_sm_by_smem(static_cast<int64_t>(smem)) >= 2;
    if (f.flush_pipe) fs.threads += 32 * kFlushPipeProducers, fs.smem = smem;
  }
  // A persistent grid: at most the blocks resident at once (launch.cuh), never more than items.
  fs.grid = dim3(static_cast<unsigned>(std::min<int64_t>(
      c.batch * d.num_v_heads * f.nsplit, std::numeric_limits<int32_t>::max())));
  const bool own_flush = group && (only != 0 || (!p.state_route && plan.flush_kernel == 1));
  if (own_flush) check_smem(fs.smem, op);
  if (only != 2) {
    if (!own_flush) return launch(p, ls);
    p.only = 1;
    p.early_exit = plan.early_exit == 1;
    launch(p, ls);
    if (only == 1) return;
  }
  launch(f, fs);
}

}  // namespace

void replay_step(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
                 const Rows& rows, TensorView y, const Plan& forced) {
  if (cache.mode.is_default())
    return replay_launch(layer, cache, cursors, in, rows, y, forced, 0, {});
  const char* op = "gdn.replay_step (cuda)";
  const Dims& d = layer.dims;
  const int64_t R = cursors.config.rows(), slots = cache.state.shape[0];
  validate::expect(cache.ring_v, arg(op, "ring_v (split mode)").c_str(),
                   {slots, d.num_v_heads, R, d.head_v_dim}, {kF32}, Device::kCUDA);
  validate::expect(cache.ring_beta, arg(op, "ring_beta (split mode)").c_str(),
                   {slots, d.num_v_heads, R}, {kF32}, Device::kCUDA);
  // fp16sr/fp16sr: ordinary steps read the checkpoint itself, so the ring's u (computed from it)
  // is the recurrence's own and the float16-state step runs as it is (its flush folds ring u;
  // v and beta are kept as in every split mode).
  if (is_sr16(cache.mode)) {
    check_sr16(cache.state, d.num_v_heads, d.head_v_dim, d.head_k_dim, op);
    return run_sr16(cache.sr, cursors, rows, cache.state.shape[0], [&] {
      replay_launch(layer, cache, cursors, in, rows, y, forced, 0, {});
    });
  }
  const bool quant = check_split(cache.mode, cache.state, cache.read, d.num_v_heads,
                                 d.head_v_dim, d.head_k_dim, /*quant=*/true, op);
  if (quant)  // the flush recomputes u from the ring's v and beta, then the copy is encoded
    return run_split_quant(cache, cursors, rows, d.num_v_heads, d.head_v_dim, d.head_k_dim,
                           [&](Cache& c, int8_t only, const StateBuffer* q, bool nvfp4) {
                             replay_launch(layer, c, cursors, in, rows, y, forced, only, {}, q,
                                           nvfp4);
                           });
  run_split16(cache, cursors.config.L, [&](Cache& c, int8_t only, const TensorView& copy) {
    replay_launch(layer, c, cursors, in, rows, y, forced, only, copy);
  });
}

void reset_slots(Cache& cache, const Rows& rows) {
  zero_split_slots(cache.state, cache.mode, cache.read, cache.sr, rows, "gdn.reset_slots (cuda)");
}

}  // namespace replayssm::cuda::gdn
