// Host side of the CUDA Mamba-2 decode ops: argument checks, launch plans (the dispatcher), and
// dispatch on dtypes to the instantiated launchers.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>

#include "common/validate.h"
#include "cuda/common/check.cuh"
#include "cuda/common/dtypes.cuh"
#include "cuda/common/memory.h"
#include "cuda/common/plan_env.h"
#include "cuda/codecs/codecs_cuda.h"
#include "cuda/common/quant_read.cuh"
#include "cuda/common/rows.h"
#include "cuda/common/split_modes.h"
#include "cuda/mamba2/launch.h"
#include "cuda/mamba2/layout.cuh"
#include "cuda/mamba2/mamba2_cuda.h"
#include "replayssm/errors.h"

namespace replayssm::cuda::mamba2 {
namespace {

using validate::kAny;
constexpr DType kF32 = DType::kF32, kF16 = DType::kF16, kBF16 = DType::kBF16;
constexpr int64_t kMaxRing = 64;      // the weights of a step's records are one warp's 2 x 32 lanes
constexpr int64_t kMaxBatch = 65535;  // grid.y
constexpr size_t kMaxReplaySmem = 227 * 1024;  // dynamic shared memory of one block (sm_90)
// The replay group kernel: its rows come in whole 16-byte ring x copies (8 bf16 / 4 fp32 rows:
// 8 serves both), and it aims at two blocks per SM (228 KB of shared memory, 1 KB per block
// reserved) so that four checkpoint stages stream per SM.
constexpr int64_t kGroupRowUnit = 8;
constexpr int64_t kGroupSmemBudget = 113 * 1024;

std::string arg(const char* op, const char* name) { return std::string(op) + " " + name; }

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The validated, normalised arguments of a call.
struct Call {
  Tokens in;  // rank-4 views ([batch, 1, ...])
  TensorView y;
  int64_t batch = 0, slots = 0;
  DType in_dtype = kF32, state_dtype = kF32, ring_dtype = kF32;
};

Call check_call(const Layer& layer, const Cache& cache, const Tokens& in, const Rows& rows,
                const TensorView& y, const char* op) {
  const Dims& d = layer.dims;
  check<ConfigError>(d.nheads > 0 && d.headdim > 0 && d.d_state > 0 && d.ngroups > 0, op,
                     ": dims nheads = ", d.nheads, ", headdim = ", d.headdim,
                     ", d_state = ", d.d_state, ", ngroups = ", d.ngroups, ", expected all > 0");
  check<ConfigError>(d.nheads % d.ngroups == 0, op, ": ngroups = ", d.ngroups,
                     " does not divide nheads = ", d.nheads);
  check<UnsupportedError>(supported_d_state(d.d_state), op, ": d_state = ", d.d_state,
                          ", expected 64 or 128 (the d_state values compiled for CUDA)");
  const Device dev = Device::kCUDA;
  validate::expect(layer.A_log, arg(op, "A_log").c_str(), {d.nheads}, {kF32}, dev);
  validate::expect(layer.dt_bias, arg(op, "dt_bias").c_str(), {d.nheads}, {kF32}, dev);
  validate::expect_optional(layer.D, arg(op, "D").c_str(), {d.nheads}, {kF32}, dev);

  Call c;
  c.in.x = validate::with_token_axis(in.x, 4);
  validate::expect(c.in.x, arg(op, "x").c_str(), {kAny, 1, d.nheads, d.headdim}, {kF32, kBF16},
                   dev);
  c.batch = c.in.x.shape[0];
  c.in_dtype = c.in.x.dtype;
  const DType t = c.in_dtype;
  c.in.dt = validate::with_token_axis(in.dt, 3);
  validate::expect(c.in.dt, arg(op, "dt").c_str(), {c.batch, 1, d.nheads}, {kF32, t}, dev);
  c.in.B = validate::with_token_axis(in.B, 4);
  validate::expect(c.in.B, arg(op, "B").c_str(), {c.batch, 1, d.ngroups, d.d_state}, {t}, dev);
  c.in.C = validate::with_token_axis(in.C, 4);
  validate::expect(c.in.C, arg(op, "C").c_str(), {c.batch, 1, d.ngroups, d.d_state}, {t}, dev);
  c.in.z = validate::with_token_axis(in.z, 4);
  validate::expect_optional(c.in.z, arg(op, "z").c_str(), {c.batch, 1, d.nheads, d.headdim}, {t},
                            dev);
  c.y = validate::with_token_axis(y, 4);
  validate::expect(c.y, arg(op, "y").c_str(), {c.batch, 1, d.nheads, d.headdim}, {t}, dev);

  validate::expect(cache.state, arg(op, "state").c_str(), {kAny, d.nheads, d.headdim, d.d_state},
                   {kF32, kF16, kBF16}, dev);
  c.slots = cache.state.shape[0];
  c.state_dtype = cache.state.dtype;
  check<UnsupportedError>(c.batch <= kMaxBatch, op, ": batch ", c.batch,
                          ", expected <= ", kMaxBatch);
  check_aligned(cache.state, op, "state");
  check_aligned(c.in.B, op, "B");
  check_aligned(c.in.C, op, "C");
  check_rows(rows, c.batch, c.slots, 0, op);
  return c;
}

void check_ring(const Layer& layer, const Cache& cache, const RingCursors& cursors, Call& c,
                const char* op) {
  const Dims& d = layer.dims;
  const Device dev = Device::kCUDA;
  validate::cursors(cursors, c.slots, RingMode::kDecode, dev, op);
  const int64_t R = cursors.config.rows();
  check<UnsupportedError>(R <= kMaxRing, op, ": ring length L = ", cursors.config.L,
                          ", expected L <= ", kMaxRing, " on CUDA");
  validate::expect(cache.ring_x, arg(op, "ring_x").c_str(), {c.slots, d.nheads, R, d.headdim},
                   {kF32, kBF16}, dev);
  c.ring_dtype = cache.ring_x.dtype;
  check<UnsupportedError>(c.ring_dtype == kF32 || c.in_dtype == kBF16, op,
                          ": ring_x is bfloat16 but the inputs are ", dtype_name(c.in_dtype),
                          ", expected a float32 ring (a bfloat16 ring is only a lossless copy of "
                          "bfloat16 inputs)");
  validate::expect(cache.ring_dt, arg(op, "ring_dt").c_str(), {c.slots, d.nheads, R}, {kF32}, dev);
  validate::expect(cache.ring_B, arg(op, "ring_B").c_str(), {c.slots, d.ngroups, R, d.d_state},
                   {c.ring_dtype}, dev);
  check_aligned(cache.ring_B, op, "ring_B");
}

StepParams base_params(const Layer& layer, const Cache& cache, const Call& c, const Rows& rows) {
  const Dims& d = layer.dims;
  StepParams p;
  p.H = static_cast<int32_t>(d.nheads);
  p.P = static_cast<int32_t>(d.headdim);
  p.G = static_cast<int32_t>(d.ngroups);
  p.heads_per_group = static_cast<int32_t>(d.nheads / d.ngroups);
  p.slots = static_cast<int32_t>(std::min<int64_t>(c.slots, INT32_MAX));
  p.batch = static_cast<int32_t>(c.batch);
  p.x = c.in.x.data;
  p.dt = c.in.dt.data;
  p.B = c.in.B.data;
  p.C = c.in.C.data;
  p.z = c.in.z.data;
  p.A_log = layer.A_log.ptr<float>();
  p.dt_bias = layer.dt_bias.ptr<float>();
  p.D = layer.D.empty() ? nullptr : layer.D.ptr<float>();
  p.state = cache.state.data;
  p.y = c.y.data;
  p.slot_ids = rows.slot_ids.ptr<int32_t>();
  p.dt_f32 = c.in.dt.dtype == kF32;
  p.softplus = layer.dt_softplus;
  p.has_D = !layer.D.empty();
  p.has_z = !c.in.z.empty();
  if (cache.mode.uses_sr()) {  // fp16sr/fp16sr: the float16 checkpoint's writes round stochastically
    p.sr.seeds = cache.sr.seeds.ptr<int64_t>();
    p.sr.steps = cache.sr.steps.ptr<int32_t>();
  }
  return p;
}

/// Rows per block and the split of P they imply: the fewest splits that fit the block-size cap
/// and give at least `min_blocks` blocks in all (so that small batches still fill the GPU).
void split_rows(int64_t P, int64_t unit, int64_t max_rows, int64_t blocks_per_split,
                int64_t min_blocks, int& rows_per_block) {
  int64_t nsplit = cdiv(P, max_rows);
  while (blocks_per_split * nsplit < min_blocks && cdiv(P, nsplit + 1) >= unit) ++nsplit;
  rows_per_block = static_cast<int>(cdiv(P, nsplit));
}

/// Bytes of state the step touches: below a few tens of MB a step is latency-bound (the whole
/// GPU moves that in ~10 µs), above it bandwidth-bound.
bool latency_bound(const Dims& d, int64_t batch, int state_bits) {
  const double bytes =
      static_cast<double>(batch) * d.nheads * d.headdim * d.d_state * state_bits / 8.0;
  return bytes <= 32.0 * (1 << 20);
}

void check_plan_rows(const Plan& plan, const Dims& d, int64_t unit, int64_t max_threads,
                     const char* op) {
  check<ConfigError>(plan.rows_per_block >= 1 && plan.rows_per_block <= d.headdim, op,
                     ": plan rows_per_block = ", plan.rows_per_block, ", expected 1..", d.headdim);
  const int64_t threads = cdiv(plan.rows_per_block, unit) * 32;
  check<ConfigError>(threads <= max_threads, op, ": plan rows_per_block = ", plan.rows_per_block,
                     " needs ", threads, " threads, expected <= ", max_threads, " (at most ",
                     max_threads / 32 * unit, " rows per block)");
}

/// Tuning runs only: RSSM_MAMBA2_CONVENTIONAL_PLAN="rpt=4,rows=16" (either) forces those fields
/// for every conventional step of the process (rpt alone: rows split for it as for a forced
/// rows_per_thread); resolve_conventional checks the result like a forced plan.
void override_conventional_plan(Plan& p) {
  for_each_plan_override("RSSM_MAMBA2_CONVENTIONAL_PLAN", [&](const std::string& key, int v) {
    if (key == "rpt") p.rows_per_thread = v;
    if (key == "rows") p.rows_per_block = v;
  });
}

Plan resolve_conventional(const Plan& forced, const Dims& d, int64_t batch, DType state,
                          const char* op) {
  const Plan autop = plan_conventional(d, batch, state);
  Plan p = forced;
  override_conventional_plan(p);
  if (p.rows_per_thread == 0) p.rows_per_thread = autop.rows_per_thread;
  check<ConfigError>(conventional_rows_per_thread(p.rows_per_thread), op,
                     ": plan rows_per_thread = ", p.rows_per_thread, ", expected 1, 2, 4 or 8");
  const HostLayout lay = HostLayout::of(d.d_state, dtype_size(state));
  if (p.rows_per_block == 0) {
    if (p.rows_per_thread == autop.rows_per_thread) {
      p.rows_per_block = autop.rows_per_block;
    } else {
      const int64_t unit = lay.rows_per_warp * p.rows_per_thread;
      split_rows(d.headdim, unit, kMaxThreads / 32 * unit, batch * d.nheads, 4 * device_sms(),
                 p.rows_per_block);
    }
  }
  check_plan_rows(p, d, lay.rows_per_warp * p.rows_per_thread, kMaxThreads, op);
  p.route = Route::kAuto;
  p.heads_per_block = 1;
  p.prefetch_ring = 0;
  return p;
}

/// Whether the group kernel can run blocks of `rows` rows: whole 16-byte ring x copies in every
/// split.
bool group_rows(int64_t P, int64_t rows) {
  return P % kGroupRowUnit == 0 && rows % kGroupRowUnit == 0;
}

/// Bits per state element of a replay launch's tiles: the checkpoint dtype's, or the read copy's.
int bits_of(DType state) { return static_cast<int>(8 * dtype_size(state)); }

/// Bytes of the group kernel's shared memory; `fold`: whether a row of the launch may fold (the
/// FOLD = true instantiation: every launch but an ordinary one, only = 1, on the output-only
/// route), which stages ring B too.
int64_t group_smem(const Dims& d, int64_t K, int64_t rows, int64_t R, int state_bits, DType ring,
                   bool fold) {
  const GroupSmem sm(static_cast<int>(R), static_cast<int>(d.d_state), static_cast<int>(rows),
                     state_bits, static_cast<int>(dtype_size(ring)), static_cast<int>(K), fold);
  return static_cast<int64_t>(sm.total) * 4;
}

/// Threads of a replay block: the rows' warps, and the chain warp of the group kernel.
int64_t replay_threads(const Plan& p, const Dims& d, int state_bits, bool group) {
  const HostLayout lay = HostLayout::of_bits(d.d_state, state_bits);
  return cdiv(p.rows_per_block, lay.rows_per_warp * p.rows_per_thread) * 32 + (group ? 32 : 0);
}

/// The resolved plan and which kernel runs it: the group kernel wherever its rows fit (every
/// heads_per_block), the per-head kernel (heads_per_block 1) otherwise.
Plan resolve_replay(const Plan& forced, const Dims& d, int64_t batch, int32_t L, int state_bits,
                    DType ring, const char* op, bool& group) {
  const Plan autop = plan_replay_bits(d, batch, L, state_bits, ring);
  Plan p = forced;
  if (p.route == Route::kAuto) p.route = autop.route;
  if (p.rows_per_thread == 0) p.rows_per_thread = autop.rows_per_thread;
  check<ConfigError>(replay_rows_per_thread(p.rows_per_thread, state_bits / 8), op,
                     ": plan rows_per_thread = ", p.rows_per_thread,
                     ", expected 4, or 8 with a 4-byte checkpoint, for the replay kernel");
  const int64_t hpg = d.nheads / d.ngroups;
  if (p.heads_per_block == 0)  // rows forced to a split the group kernel cannot run: one head
    p.heads_per_block = p.rows_per_block != 0 && !group_rows(d.headdim, p.rows_per_block)
                            ? 1
                            : autop.heads_per_block;
  check<ConfigError>(
      p.heads_per_block >= 1 && p.heads_per_block <= 32 && hpg % p.heads_per_block == 0, op,
      ": plan heads_per_block = ", p.heads_per_block,
      ", expected a divisor of the heads per group ", hpg, " (at most 32)");
  const HostLayout lay = HostLayout::of_bits(d.d_state, state_bits);
  const int64_t unit = lay.rows_per_warp * p.rows_per_thread;
  if (p.rows_per_block == 0) {
    if (p.rows_per_thread == autop.rows_per_thread && p.heads_per_block == autop.heads_per_block)
      p.rows_per_block = autop.rows_per_block;
    else if (group_rows(d.headdim, d.headdim))  // whole heads
      p.rows_per_block =
          static_cast<int>(std::min<int64_t>(d.headdim, 15 * unit) / kGroupRowUnit * kGroupRowUnit);
    else
      split_rows(d.headdim, unit, kReplayThreads / 32 * unit,
                 std::max<int64_t>(batch, 1) * d.nheads, 4 * device_sms(), p.rows_per_block);
  }
  if (p.prefetch_ring < 0) p.prefetch_ring = autop.prefetch_ring;
  if (p.flush_kernel < 0) p.flush_kernel = autop.flush_kernel;
  check<ConfigError>(p.flush_kernel == 0 || p.flush_kernel == 1, op,
                     ": plan flush_kernel = ", p.flush_kernel, ", expected -1 (auto), 0 or 1");
  if (p.early_exit < 0) p.early_exit = autop.early_exit;
  check<ConfigError>(p.early_exit == 0 || p.early_exit == 1, op,
                     ": plan early_exit = ", p.early_exit, ", expected -1 (auto), 0 or 1");
  if (p.overlap < 0) p.overlap = autop.overlap;
  if (p.flush_split == 0) p.flush_split = autop.flush_split;
  check<ConfigError>(p.flush_split >= 0 && p.flush_split <= d.headdim, op,
                     ": plan flush_split = ", p.flush_split, ", expected 0 (auto) .. ", d.headdim);
  check<ConfigError>(p.overlap == 0 || p.overlap == 1, op,
                     ": plan overlap = ", p.overlap, ", expected -1 (auto), 0 or 1");
  check<ConfigError>(p.rows_per_block >= 1 && p.rows_per_block <= d.headdim, op,
                     ": plan rows_per_block = ", p.rows_per_block, ", expected 1..", d.headdim);
  group = group_rows(d.headdim, p.rows_per_block);
  check<ConfigError>(group || p.heads_per_block == 1, op,
                     ": plan heads_per_block = ", p.heads_per_block,
                     " with rows_per_block = ", p.rows_per_block,
                     ", expected rows_per_block (and headdim) a multiple of ", kGroupRowUnit,
                     " (the group kernel) or heads_per_block 1");
  const int64_t threads = replay_threads(p, d, state_bits, group);
  check<ConfigError>(threads <= kReplayThreads, op, ": plan rows_per_block = ", p.rows_per_block,
                     " needs ", threads, " threads, expected <= ", kReplayThreads);
  check<ConfigError>(
      !group || p.heads_per_block * p.rows_per_block <= kGroupTokenItems * (threads - 32), op,
      ": plan heads_per_block x rows_per_block = ", p.heads_per_block * p.rows_per_block,
      ", expected <= ", kGroupTokenItems * (threads - 32), " (token items of the block's threads)");
  return p;
}

template <class TIn, class TState>
void dispatch_ring(DType ring, const StepParams& p, const LaunchShape& ls, cudaStream_t s) {
  if (ring == kBF16) {
    if constexpr (std::is_same_v<TIn, bf16>) return launch_replay<TIn, TState, bf16>(p, ls, s);
  }
  launch_replay<TIn, TState, float>(p, ls, s);
}

template <class TIn>
void dispatch_replay_state(DType state, DType ring, const StepParams& p, const LaunchShape& ls,
                           cudaStream_t s) {
  if (state == kF32) return dispatch_ring<TIn, float>(ring, p, ls, s);
  if (state == kF16) return dispatch_ring<TIn, f16>(ring, p, ls, s);
  dispatch_ring<TIn, bf16>(ring, p, ls, s);
}

/// The replay group kernel over a quantised read copy (nvfp4 or e4m3 tiles).
template <class TIn>
void dispatch_quant(bool nvfp4, DType ring, const StepParams& p, const LaunchShape& ls,
                    cudaStream_t s) {
  if (nvfp4) return dispatch_ring<TIn, nvfp4x2>(ring, p, ls, s);
  dispatch_ring<TIn, e4m3>(ring, p, ls, s);
}

template <class TIn>
void dispatch_conventional_state(DType state, const StepParams& p, const LaunchShape& ls,
                                 cudaStream_t s) {
  if (state == kF32) return launch_conventional<TIn, float>(p, ls, s);
  if (state == kF16) return launch_conventional<TIn, f16>(p, ls, s);
  launch_conventional<TIn, bf16>(p, ls, s);
}

/// Tuning runs only: RSSM_MAMBA2_REPLAY_PLAN="rpt=8,split=2,prefetch=0,hpb=4,flush=0,exit=1,pdl=1,
/// fsplit=2" (any subset; split = blocks per head: rows_per_block = ceil(P / split), in whole 8-row
/// chunks when P is) replaces those fields of the dispatcher's choice for every replay step of the
/// process.
/// resolve_replay checks the result like a forced plan.
void override_replay_plan(Plan& p, int64_t P) {
  for_each_plan_override("RSSM_MAMBA2_REPLAY_PLAN", [&](const std::string& key, int v) {
    if (key == "rpt") p.rows_per_thread = v;
    if (key == "split" && v > 0)
      p.rows_per_block = static_cast<int>(
          P % kGroupRowUnit == 0 ? cdiv(cdiv(P, v), kGroupRowUnit) * kGroupRowUnit : cdiv(P, v));
    if (key == "hpb" && v > 0) p.heads_per_block = v;
    if (key == "prefetch") p.prefetch_ring = v;
    if (key == "flush") p.flush_kernel = v;
    if (key == "exit") p.early_exit = v;
    if (key == "pdl") p.overlap = v;
    if (key == "fsplit") p.flush_split = v;
  });
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
  p.heads_per_block = 1;
  p.prefetch_ring = 0;
  const bool f32 = dtype_size(state) == 4;
  if (f32 && latency_bound(d, batch, bits_of(state))) {
    // Latency-bound fp32 steps: blocks of 8 rows, 2 per thread (H200, Nano-4B / Super batch 1:
    // 4.49 / 4.36 µs, batch 8: 18.4 / 19.5 µs, against 4.98 / 4.88 and 20.1 / 21.9 with the
    // earlier 4 rows per thread over ~4 blocks per SM; 1 row per thread in blocks of 4-16 rows
    // 4.9 µs at batch 1 and 24-25 at batch 8; 8 per thread 5.8-6.0 µs at batch 1;
    // bench/NOTES.md "Small batches").
    p.rows_per_thread = 2;
    p.rows_per_block = static_cast<int>(std::min<int64_t>(8, d.headdim));
    return p;
  }
  // Bandwidth-bound: 8 rows (128 bytes of fp32 state) in flight per thread; 16-bit state: 4 rows
  // per thread, more threads.
  p.rows_per_thread = f32 ? 8 : 4;
  const HostLayout lay = HostLayout::of(d.d_state, dtype_size(state));
  const int64_t unit = lay.rows_per_warp * p.rows_per_thread;
  split_rows(d.headdim, unit, kMaxThreads / 32 * unit, std::max<int64_t>(batch, 1) * d.nheads,
             4 * device_sms(), p.rows_per_block);
  return p;
}

Plan plan_replay(const Dims& d, int64_t batch, int32_t L, DType state, DType ring) {
  return plan_replay_bits(d, batch, L, bits_of(state), ring);
}

Plan plan_replay_bits(const Dims& d, int64_t batch, int32_t L, int state_bits, DType ring) {
  Plan p;
  // The state-and-output route folds every record into every state element on every step; it
  // only pays when there is at most one record to fold (L <= 2), where it skips the B·C pass.
  p.route = L <= 2 ? Route::kStateAndOutput : Route::kOutputOnly;
  const bool small = latency_bound(d, batch, state_bits);
  // Latency-bound steps copy the whole ring with the checkpoint (no wait for the cursor).
  p.prefetch_ring = small ? 1 : 0;
  // Flush rows fold in a launch of their own (flush.cuh) wherever they would otherwise fold
  // inside the group kernel's ordinary launch: there the fold spills and straggles.
  p.flush_kernel = p.route == Route::kOutputOnly ? 1 : 0;
  // The ordinary launch waits for is_flush before streaming a row: as fast on ordinary steps,
  // and a flush row's two stages are not read and dropped (H200: flush step -14% at Nano-4B
  // batch 256, bench/NOTES.md "Mamba-2 flush kernel, pipelined").
  p.early_exit = 1;
  // The flush launch (persistent, one pass over the flush rows) starts while the ordinary
  // launch's last wave runs (programmatic dependent launch): the two touch disjoint rows.
  p.overlap = 1;
  // fp32 checkpoints: 8 rows (128 bytes) per thread; 16-bit ones 4 (a row is twice the columns
  // per lane). The per-head kernel takes 4 where the step is latency-bound: more threads.
  const bool group = group_rows(d.headdim, d.headdim);
  p.rows_per_thread = state_bits == 32 && (group || !small) ? 8 : 4;
  const HostLayout lay = HostLayout::of_bits(d.d_state, state_bits);
  const int64_t unit = lay.rows_per_warp * p.rows_per_thread;
  const int64_t hpg = d.nheads / d.ngroups;
  const int64_t sms = device_sms();
  const int64_t rows_b = std::max<int64_t>(batch, 1);
  p.heads_per_block = 1;
  if (group) {
    // The group kernel: the heads per block K that give the fewest waves of two blocks per SM,
    // and among those the most blocks (smallest K). A block pays its chain (cursor -> ring ->
    // weights) once per wave, and blocks resident together hide each other's latency: H200,
    // Super-120B batch 8, K 2 -> 4 (512 -> 256 blocks, 2 -> 1 wave): ordinary step 24.4 ->
    // 18.2 µs (bench/NOTES.md "wave quantisation"). Then, once the batch spans two such waves, a
    // K down to half of that one whose ordinary launch keeps a third block per SM (shared memory
    // and registers allowing): Super-120B with a bf16 ring, K 8 -> 4: window 314.6 -> 308.1 µs at
    // batch 256, 48.0 -> 45.9 µs at 32 (H200, 91de005; "Session 14"). Small batches then split
    // one head's rows in whole 8-row chunks.
    const int64_t max_rows =
        std::min<int64_t>(d.headdim, 15 * unit) / kGroupRowUnit * kGroupRowUnit;
    if (max_rows == d.headdim) {
      auto fits = [&](int64_t K) {
        return hpg % K == 0 &&
               group_smem(d, K, d.headdim, L, state_bits, ring, true) <= kGroupSmemBudget &&
               K * d.headdim <= kGroupTokenItems * cdiv(d.headdim, unit) * 32;
      };
      auto blocks = [&](int64_t K) { return rows_b * d.nheads / K; };
      int64_t best = std::numeric_limits<int64_t>::max();
      for (int64_t K = 1; K <= hpg; ++K) {
        if (!fits(K)) continue;
        const int64_t waves = cdiv(blocks(K), 2 * sms);
        if (waves < best) best = waves, p.heads_per_block = static_cast<int>(K);
      }
      // Blocks per SM of the ordinary launch: it folds no row on the output-only route with a
      // flush launch (no ring B staged); 64 registers per thread.
      const bool folds = p.route == Route::kStateAndOutput || p.flush_kernel != 1;
      const int64_t threads = cdiv(d.headdim, unit) * 32 + 32;
      auto per_sm = [&](int64_t K) {
        const int64_t smem = group_smem(d, K, d.headdim, L, state_bits, ring, folds);
        return std::min<int64_t>({3, blocks_per_sm_by_smem(smem), 65536 / (threads * 64)});
      };
      const int64_t k0 = p.heads_per_block;
      if (best >= 2 && best != std::numeric_limits<int64_t>::max()) {
        int64_t best_sm = per_sm(k0), best_waves = cdiv(blocks(k0), best_sm * sms);
        for (int64_t K = (k0 + 1) / 2; K < k0; ++K) {
          if (!fits(K)) continue;
          const int64_t bps = per_sm(K), waves = cdiv(blocks(K), bps * sms);
          if (bps > best_sm || (bps == best_sm && waves < best_waves)) {
            best_sm = bps, best_waves = waves;
            p.heads_per_block = static_cast<int>(K);
          }
        }
      }
    }
    int64_t rows = d.headdim;
    if (p.heads_per_block == 1)
      while (rows > max_rows ||
             (rows_b * d.nheads * cdiv(d.headdim, rows) < 2 * sms && rows > kGroupRowUnit)) {
        const int64_t next = cdiv(rows / 2, kGroupRowUnit) * kGroupRowUnit;
        if (next >= rows) break;
        rows = next;
      }
    p.rows_per_block = static_cast<int>(rows);
  } else {  // the per-head kernel
    split_rows(d.headdim, unit, kReplayThreads / 32 * unit, rows_b * d.nheads, 4 * sms,
               p.rows_per_block);
  }
  override_replay_plan(p, d.headdim);
  return p;
}

void conventional_step(const Layer& layer, Cache& cache, const Tokens& in, const Rows& rows,
                       TensorView y, const Plan& forced) {
  const char* op = "mamba2.conventional_step (cuda)";
  const Call c = check_call(layer, cache, in, rows, y, op);
  const Dims& d = layer.dims;
  const Plan plan = resolve_conventional(forced, d, c.batch, c.state_dtype, op);
  if (c.batch == 0) return;
  StepParams p = base_params(layer, cache, c, rows);
  p.rows_per_block = plan.rows_per_block;
  p.nsplit = static_cast<int32_t>(cdiv(d.headdim, plan.rows_per_block));
  const HostLayout lay = HostLayout::of(d.d_state, dtype_size(c.state_dtype));
  LaunchShape ls;
  ls.grid = dim3(static_cast<unsigned>(d.nheads * p.nsplit), static_cast<unsigned>(c.batch));
  ls.threads =
      static_cast<int>(cdiv(plan.rows_per_block, lay.rows_per_warp * plan.rows_per_thread) * 32);
  ls.smem = static_cast<size_t>(
      checkpoint_tile_floats(plan.rows_per_block, d.d_state, dtype_size(c.state_dtype)) * 4);
  ls.N = static_cast<int>(d.d_state);
  ls.rpt = plan.rows_per_thread;
  const auto stream = static_cast<cudaStream_t>(rows.stream);
  if (c.in_dtype == kF32)
    dispatch_conventional_state<float>(c.state_dtype, p, ls, stream);
  else
    dispatch_conventional_state<bf16>(c.state_dtype, p, ls, stream);
}

namespace {

/// One replay launch over `cache.state` (the checkpoint, or a split mode's 16-bit read copy):
/// every row, or (only = 1) the ordinary rows, or (only = 2) the flush rows, which then also write
/// `copy`. With `quant` (only = 1), the ordinary rows read that quantised read copy instead (NVFP4
/// when cache_read_nvfp4, else FP8); a forced state-and-output route is then a ConfigError.
void replay_launch(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
                   const Rows& rows, TensorView y, const Plan& forced, int8_t only,
                   const TensorView& copy, const StateBuffer* quant = nullptr,
                   bool cache_read_nvfp4 = false) {
  const char* op = "mamba2.replay_step (cuda)";
  Call c = check_call(layer, cache, in, rows, y, op);
  check_ring(layer, cache, cursors, c, op);
  // L = 1: every step folds exactly the current token into the checkpoint, which is the
  // conventional step; run its kernel (the dispatcher's fallback where replay cannot win, issue
  // "never slower"). The rings are not touched; commit keeps h = 0, origin = 0.
  if (cursors.config.L == 1) return conventional_step(layer, cache, in, rows, y, Plan{});
  const Dims& d = layer.dims;
  const bool nvfp4 = quant && cache_read_nvfp4;
  const int bits = quant ? (nvfp4 ? 4 : 8) : bits_of(c.state_dtype);
  bool group = false;
  const Plan want = quant ? quant_read_plan(forced, op) : forced;
  const Plan plan = resolve_replay(want, d, c.batch, cursors.config.L, bits, c.ring_dtype, op, group);
  if (only == 1) {  // a split mode: the flush call's plan, checked up front (its checkpoint is
                    // float32, or fp16sr/nvfp4's float16 one: a quantised mode's cache.state)
    bool flush_group = false;
    resolve_replay(forced, d, c.batch, cursors.config.L, quant ? bits_of(c.state_dtype) : 32,
                   c.ring_dtype, op, flush_group);
  }
  // The group kernel copies ring x rows in 16-byte pieces.
  if (reinterpret_cast<uintptr_t>(cache.ring_x.data) % 16 != 0) {
    check<ConfigError>(plan.heads_per_block == 1, op,
                       ": ring_x is not 16-byte aligned, expected heads_per_block 1");
    group = false;
  }
  check<UnsupportedError>(only == 0 || group, op, ": split state modes run on the group kernel, "
                          "but the plan (rows_per_block ", plan.rows_per_block, ") selects the "
                          "per-head kernel");
  if (c.batch == 0) return;
  StepParams p = base_params(layer, cache, c, rows);
  p.only = only;
  p.copy = copy.data;
  p.copy_f16 = copy.dtype == kF16;
  if (quant) {
    p.state = quant->values.data;
    p.read_scales = nvfp4 ? quant->scales.blocks.data : quant->scales.rows.data;
    p.read_global = nvfp4 ? quant->scales.global.ptr<float>() : nullptr;
  }
  const int64_t R = cursors.config.rows();
  p.R = static_cast<int32_t>(R);
  p.rows_per_block = plan.rows_per_block;
  p.nsplit = static_cast<int32_t>(cdiv(d.headdim, plan.rows_per_block));
  p.ring_x = cache.ring_x.data;
  p.ring_dt = cache.ring_dt.ptr<float>();
  p.ring_B = cache.ring_B.data;
  p.origin = cursors.origin.ptr<int32_t>();
  p.hist = cursors.h.ptr<int32_t>();
  p.is_flush = cursors.is_flush.ptr<int8_t>();
  p.state_route = plan.route == Route::kStateAndOutput;
  p.prefetch_ring = plan.prefetch_ring != 0;
  p.group = group;
  p.heads_per_block = plan.heads_per_block;
  p.nchunks = static_cast<int32_t>(d.nheads / d.ngroups / plan.heads_per_block);
  LaunchShape ls;
  ls.threads = static_cast<int>(replay_threads(plan, d, bits, group));
  if (group) {
    ls.grid = dim3(static_cast<unsigned>(d.ngroups * p.nchunks * p.nsplit),
                   static_cast<unsigned>(c.batch));
    ls.smem = static_cast<size_t>(  // the most a launch needs (one whose rows may fold)
        group_smem(d, plan.heads_per_block, plan.rows_per_block, R, bits, c.ring_dtype, true));
  } else {
    ls.grid = dim3(static_cast<unsigned>(d.nheads * p.nsplit), static_cast<unsigned>(c.batch));
    const ReplaySmem sm(static_cast<int>(R), static_cast<int>(d.d_state), plan.rows_per_block,
                        static_cast<int>(dtype_size(c.state_dtype)));
    ls.smem = static_cast<size_t>(sm.total) * sizeof(float);
  }
  check<UnsupportedError>(ls.smem <= kMaxReplaySmem, op, ": the plan needs ", ls.smem,
                          " bytes of shared memory per block, expected <= ", kMaxReplaySmem,
                          " (fewer rows per block)");
  ls.N = static_cast<int>(d.d_state);
  ls.rpt = plan.rows_per_thread;
  const auto stream = static_cast<cudaStream_t>(rows.stream);
  auto enqueue = [&](const StepParams& q, const LaunchShape& s0) {
    LaunchShape s = s0;
    if (q.group && !s.flush)  // a launch in which no row folds stages no ring B (launch.cuh)
      s.smem = static_cast<size_t>(group_smem(d, plan.heads_per_block, plan.rows_per_block, R,
                                              bits, c.ring_dtype, group_folds(q)));
    if (quant) {
      if (c.in_dtype == kF32)
        dispatch_quant<float>(nvfp4, c.ring_dtype, q, s, stream);
      else
        dispatch_quant<bf16>(nvfp4, c.ring_dtype, q, s, stream);
    } else if (c.in_dtype == kF32) {
      dispatch_replay_state<float>(c.state_dtype, c.ring_dtype, q, s, stream);
    } else {
      dispatch_replay_state<bf16>(c.state_dtype, c.ring_dtype, q, s, stream);
    }
  };
  // Flush rows in a launch of their own (flush.cuh): after the ordinary rows' launch (only = 1),
  // or alone as a split mode's flush launch. The state-and-output route folds every row in one.
  // It copies the token's x, z, B and C in 16-byte pieces: other inputs fold in the group kernel.
  auto at16 = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  const bool inputs16 = at16(p.x) && at16(p.B) && at16(p.C) && (!p.has_z || at16(p.z));
  if (!group || quant || p.state_route || plan.flush_kernel != 1 || !inputs16)
    return enqueue(p, ls);
  bool overlap = false;
  if (only != 2) {
    p.only = 1;
    p.early_exit = plan.early_exit == 1;
    enqueue(p, ls);
    // A split mode's ordinary launch (only = 1 over the 16-bit read copy): its flush launch is
    // the caller's next call (only = 2, over the fp32 checkpoint).
    if (only == 1) return;
    // The flush launch may overlap the ordinary one only when that launch's flush-row blocks
    // leave before reading anything: then the two read and write disjoint rows and slots.
    overlap = p.early_exit && plan.overlap == 1;
    p.early_exit = false;
  }
  StepParams f = p;
  f.only = 2;
  LaunchShape fs;
  fs.flush = true;
  fs.overlap = overlap;
  fs.N = ls.N;
  const int64_t state_bytes = dtype_size(c.state_dtype);
  fs.rpt = state_bytes == 4 ? 8 : 4;  // 32 state registers per thread either way
  const HostLayout lay = HostLayout::of(d.d_state, state_bytes);
  const int64_t unit = lay.rows_per_warp * fs.rpt;
  // Blocks of at most kFlushThreads: whole heads where they fit, else the head's rows split
  // evenly (or into the plan's flush_split pieces, rounded to whole row units).
  f.nsplit = static_cast<int32_t>(std::max<int64_t>(cdiv(d.headdim, kFlushThreads / 32 * unit),
                                                    plan.flush_split));
  f.rows_per_block = static_cast<int32_t>(cdiv(cdiv(d.headdim, f.nsplit), unit) * unit);
  f.nsplit = static_cast<int32_t>(cdiv(d.headdim, f.rows_per_block));
  fs.threads = static_cast<int>(cdiv(f.rows_per_block, unit) * 32);
  fs.smem = static_cast<size_t>(FlushSmem(static_cast<int>(R), static_cast<int>(d.d_state),
                                          f.rows_per_block, static_cast<int>(state_bytes),
                                          static_cast<int>(dtype_size(c.ring_dtype)),
                                          static_cast<int>(dtype_size(c.in_dtype)))
                                    .total) *
            sizeof(float);
  check<UnsupportedError>(fs.smem <= kMaxReplaySmem, op, ": the flush launch needs ", fs.smem,
                          " bytes of shared memory per block, expected <= ", kMaxReplaySmem,
                          " (a shorter ring)");
  // A persistent grid: as many blocks as are resident at once (the launcher asks the occupancy
  // calculator), never more than there are items.
  fs.grid = dim3(static_cast<unsigned>(
      std::min<int64_t>(c.batch * d.nheads * f.nsplit, std::numeric_limits<int32_t>::max())));
  enqueue(f, fs);
}

}  // namespace

void replay_step(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
                 const Rows& rows, TensorView y, const Plan& forced) {
  if (cache.mode.is_default())
    return replay_launch(layer, cache, cursors, in, rows, y, forced, 0, {});
  const Dims& d = layer.dims;
  const char* op = "mamba2.replay_step (cuda)";
  if (is_sr16(cache.mode)) {
    check_sr16(cache.state, d.nheads, d.headdim, d.d_state, op);
    return run_sr16(cache.sr, cursors, rows, cache.state.shape[0], [&] {
      replay_launch(layer, cache, cursors, in, rows, y, forced, 0, {});
    });
  }
  if (check_split(cache.mode, cache.state, cache.read, d.nheads, d.headdim, d.d_state,
                  /*quant=*/true, op))
    return run_split_quant(cache, cursors, rows, d.nheads, d.headdim, d.d_state,
                           [&](Cache& c, int8_t only, const StateBuffer* q, bool nvfp4) {
                             replay_launch(layer, c, cursors, in, rows, y, forced, only, {}, q,
                                           nvfp4);
                           });
  run_split16(cache, cursors.config.L, [&](Cache& c, int8_t only, const TensorView& copy) {
    replay_launch(layer, c, cursors, in, rows, y, forced, only, copy);
  });
}

}  // namespace replayssm::cuda::mamba2
