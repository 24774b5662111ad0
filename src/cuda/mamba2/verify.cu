// Host side of the CUDA Mamba-2 speculative ops: mamba2::verify (verify.cuh) and the snapshot
// baseline (snapshot.cuh). The public API (src/api/mamba2.cpp) has checked shapes, dtypes, the
// ring and the cursors' layout before verify() is reached; the snapshot functions are called
// directly (benchmarks, tests) and check their own arguments.
#include <cuda_runtime.h>

#include <string>

#include "common/validate.h"
#include "cuda/common/check.cuh"
#include "cuda/common/memory.h"
#include "cuda/common/snapshot_select.h"
#include "cuda/common/dtypes.cuh"
#include "cuda/common/launch.cuh"
#include "cuda/common/plan_env.h"
#include "cuda/common/rows.h"
#include "cuda/mamba2/mamba2_cuda.h"
#include "cuda/mamba2/snapshot.cuh"
#include "cuda/mamba2/verify.cuh"
#include "cuda/mamba2/verify_group.cuh"
#include "replayssm/errors.h"

namespace replayssm::cuda::mamba2 {
namespace {

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16;
constexpr int64_t kMaxRing = 64;  // the window's deltas are one warp's 2 x 32 lanes
constexpr int64_t kMaxBatch = 65535;

/// The token axis padded to a compiled width.
int padded_T(int64_t T) { return T <= 1 ? 1 : T <= 2 ? 2 : T <= 4 ? 4 : 8; }

template <class Fn>
void with_N_K(int64_t N, int K, const char* op, Fn&& fn) {
  auto by_k = [&](auto n) {
    switch (K) {
      case 1: return fn(n, std::integral_constant<int, 1>{});
      case 2: return fn(n, std::integral_constant<int, 2>{});
      case 4: return fn(n, std::integral_constant<int, 4>{});
      default: return fn(n, std::integral_constant<int, 8>{});
    }
  };
  if (N == 64) return by_k(std::integral_constant<int, 64>{});
  if (N == 128) return by_k(std::integral_constant<int, 128>{});
  throw UnsupportedError(std::string(op) + ": d_state " + std::to_string(N) +
                         " is not compiled, expected 64 or 128");
}

/// The arguments every speculative launch shares, filled after the checks of `op`.
StepParams token_params(const Layer& layer, const TensorView& state, const Tokens& in,
                        const Rows& rows, const TensorView& y, const char* op) {
  const Dims& d = layer.dims;
  check<UnsupportedError>(d.d_state == 64 || d.d_state == 128, op, ": d_state = ", d.d_state,
                          ", expected 64 or 128 (the d_state values compiled for CUDA)");
  check<UnsupportedError>(state.dtype == kF32, op, ": state dtype ", dtype_name(state.dtype),
                          ", expected float32 (speculative steps keep an fp32 state)");
  check<UnsupportedError>(in.x.shape[0] <= kMaxBatch, op, ": batch ", in.x.shape[0],
                          ", expected <= ", kMaxBatch);
  check_aligned(state, op, "state");
  check_aligned(in.B, op, "B");
  check_aligned(in.C, op, "C");
  StepParams p;
  p.H = static_cast<int32_t>(d.nheads);
  p.P = static_cast<int32_t>(d.headdim);
  p.G = static_cast<int32_t>(d.ngroups);
  p.heads_per_group = static_cast<int32_t>(d.nheads / d.ngroups);
  p.slots = static_cast<int32_t>(std::min<int64_t>(state.shape[0], INT32_MAX));
  p.batch = static_cast<int32_t>(in.x.shape[0]);
  p.Ty = static_cast<int32_t>(in.x.shape[1]);
  p.x = in.x.data;
  p.dt = in.dt.data;
  p.B = in.B.data;
  p.C = in.C.data;
  p.z = in.z.data;
  p.A_log = layer.A_log.ptr<float>();
  p.dt_bias = layer.dt_bias.ptr<float>();
  p.D = layer.D.empty() ? nullptr : layer.D.ptr<float>();
  p.state = state.data;
  p.y = y.data;
  p.slot_ids = rows.slot_ids.ptr<int32_t>();
  p.num_tokens = rows.num_tokens.empty() ? nullptr : rows.num_tokens.ptr<int32_t>();
  p.dt_f32 = in.dt.dtype == kF32;
  p.softplus = layer.dt_softplus;
  p.has_D = !layer.D.empty();
  p.has_z = !in.z.empty();
  return p;
}

/// A verify launch: the group kernel (verify_group.cuh: heads_per_block heads of one group per
/// block) or the one-head kernel (verify.cuh); headdim rows per block (a multiple of 16 or the
/// whole headdim for the group kernel, of 8 for the one-head kernel) and threads per block.
struct VerifyPlan {
  bool group = true;
  int rows_per_block = 0, threads = 0, heads_per_block = 1;
  int l2ahead = 0;  ///< group kernel: units requested into L2 this far ahead of their loads (0 or 4)
};

/// Whole rows up to `unit`-row items: ceil(P / split) rounded up to a multiple of unit.
int split_rows(int64_t P, int64_t split, int unit) {
  return static_cast<int>(((P + split - 1) / split + unit - 1) / unit * unit);
}

/// Rows x padded tokens (batch x KT) from which the group kernel is the default at KT >= 2; rows
/// from which it is at KT = 1 (not measured below 128 rows since session 12).
constexpr int64_t kVerifyGroupMinTokens = 64, kVerifyGroupMinBatchT1 = 128;
/// Batch from which the group kernel requests units into L2 ahead (at KT <= 4).
constexpr int64_t kVerifyL2AheadMinBatch = 256;

/// Group kernel: whole heads (H200, session 24: Nano-4B batch 256 T = 4 / 8 7-15% faster than two
/// blocks per head, which repeat the chain), heads_per_block the largest divisor of the group's
/// heads whose shared memory stays under kVerifyBlockSmem (two blocks per SM), 8 streaming warps
/// and the two chain warps; the one-head kernel (whole heads in 256-thread blocks) below
/// kVerifyGroupMinTokens rows x tokens (kVerifyGroupMinBatchT1 rows at T = 1). Tuning runs and
/// tests may override: RSSM_MAMBA2_VERIFY_PLAN="group=0" / "group=1" (either kernel at any
/// batch), "hpb=2", "split=2", "threads=160" (split: ceil(P / split) rows per block, rounded up to
/// 16 rows for the group kernel and 8 for the one-head kernel, so P = 64 with split = 3 makes 2
/// blocks), "l2ahead=0" / "l2ahead=4" (the group kernel's L2 requests ahead, verify_group.cuh).
VerifyPlan plan_verify(int64_t P, int64_t N, int64_t heads_per_group, int64_t batch, int R,
                       int KT, int ring_bytes, int in_bytes, const char* op) {
  VerifyPlan v;
  // The group kernel from batch x KT = 64 (H200, session 25, Nano-4B and Super-120B, batches 1-64,
  // T 2 / 4 / 8; bench/NOTES.md "Session 25"): 1.0-1.8x the one-head kernel at every point
  // from there (batch 32 at T = 2, 16 at T = 4, 8 at T = 8); below it the group kernel's
  // whole-group blocks are too few (up to 2.8x slower at batch 1), the one-head kernel stays.
  // T = 1 keeps the session-12 threshold (batch 128) until it is measured.
  v.group = KT >= 2 ? batch * KT >= kVerifyGroupMinTokens : batch >= kVerifyGroupMinBatchT1;
  // L2 requests ahead where they paid (H200, session 28, Nano-4B and Super-120B, padded KT):
  // bf16 inputs: KT = 2 and 4 from batch 256 (T = 2 -3 to -7%, T = 4 all-accept -4 to -5%,
  // all-reject -2.3 to +3.3%; at 32-128 -2.5 to +7.5%; s28-m2-verify-l2ahead.txt); fp32 inputs
  // (the engine's): KT = 1 wherever the group kernel runs (from batch 128: -3 to -12%) and KT = 4
  // from 256 (all-accept -5 to -6%, all-reject -0.1 to +0.9%), not KT = 2 (-2.6 to +2.8%;
  // s28-m2-verify-f32-l2ahead.txt); KT = 8 lost everywhere measured (+1-11%). bf16 at KT = 1 is
  // unmeasured and stays off.
  const bool wide = batch >= kVerifyL2AheadMinBatch;
  const bool l2 = in_bytes == 4 ? KT == 1 || (KT == 4 && wide) : (KT == 2 || KT == 4) && wide;
  v.l2ahead = v.group && l2 ? kVerifyL2Ahead : 0;
  int split = 0, hpb = 0, threads = 0;
  for_each_plan_override("RSSM_MAMBA2_VERIFY_PLAN", [&](const std::string& key, int val) {
    if (key == "group") v.group = val != 0;
    if (key == "split" && val > 0) split = val;
    if (key == "threads") threads = val;
    if (key == "hpb") hpb = val;
    if (key == "l2ahead") v.l2ahead = val;
  });
  check<ConfigError>(v.l2ahead == 0 || v.l2ahead == kVerifyL2Ahead, op, ": verify plan l2ahead = ",
                     v.l2ahead, ", expected 0 or ", kVerifyL2Ahead);
  if (v.group) {
    v.threads = threads ? threads : kVerifyGroupThreads;
    v.rows_per_block = std::min<int>(split_rows(P, split > 0 ? split : 1, 16), static_cast<int>(P));
    for (int64_t k = std::min<int64_t>(heads_per_group, 32); k >= 1; --k) {
      const VerifyGroupSmem sm(R, static_cast<int>(N), v.rows_per_block, static_cast<int>(k), KT,
                               ring_bytes, in_bytes);
      if (heads_per_group % k == 0 && (sm.total * 4 <= kVerifyBlockSmem || k == 1)) {
        v.heads_per_block = static_cast<int>(k);
        break;
      }
    }
    if (hpb != 0) v.heads_per_block = hpb;
  } else {  // whole heads (or `split` blocks per head), one head per block
    v.threads = threads ? threads : kVerifyMaxThreads;
    v.rows_per_block = split > 0 ? std::min<int>(split_rows(P, split, 8), static_cast<int>(P))
                                 : static_cast<int>(P);
  }
  const int max_threads = v.group ? kVerifyGroupThreads : kVerifyMaxThreads;
  const int min_threads = v.group ? kVerifyChainThreads + 32 : 64;
  check<ConfigError>(v.threads >= min_threads && v.threads <= max_threads && v.threads % 32 == 0,
                     op, ": verify plan threads = ", v.threads, ", expected a multiple of 32 in ",
                     min_threads, "..", max_threads);
  check<ConfigError>(v.heads_per_block >= 1 && v.heads_per_block <= 32 &&
                         heads_per_group % v.heads_per_block == 0,
                     op, ": verify plan hpb = ", v.heads_per_block,
                     ", expected a divisor of the group's ", heads_per_group, " heads, at most 32");
  return v;
}

template <class TIn, class TRing>
void launch_verify(const StepParams& p, int64_t N, int K, bool group, int l2ahead, int threads,
                   size_t smem, cudaStream_t s) {
  const char* op = "mamba2.verify (cuda)";
  with_N_K(N, K, op, [&](auto n, auto k) {
    constexpr int kN = decltype(n)::value, kK = decltype(k)::value;
    const dim3 grid(static_cast<unsigned>(p.G * p.nchunks * p.nsplit), static_cast<unsigned>(p.batch));
    if (group && l2ahead == kVerifyL2Ahead)
      launch_with_smem(verify_group_kernel<TIn, TRing, kN, kK, kVerifyL2Ahead>, grid, threads, smem,
                       s, p, op);
    else if (group)
      launch_with_smem(verify_group_kernel<TIn, TRing, kN, kK, 0>, grid, threads, smem, s, p, op);
    else
      launch_with_smem(verify_kernel<TIn, TRing, kN, kK>,
                       dim3(static_cast<unsigned>(p.H * p.nsplit), static_cast<unsigned>(p.batch)),
                       threads, smem, s, p, op);
  });
}

/// Token-axis views of rank 4 (x, B, C, z, y) / 3 (dt): the snapshot entry points accept [batch,
/// T, ...] only; check the shared shape.
void check_snapshot_tokens(const Layer& layer, const TensorView& state, const Tokens& in,
                           const TensorView& y, const char* op) {
  const Dims& d = layer.dims;
  const Device dev = Device::kCUDA;
  using validate::kAny;
  auto name = [&](const char* n) { return std::string(op) + " " + n; };
  validate::expect(layer.A_log, name("A_log").c_str(), {d.nheads}, {kF32}, dev);
  validate::expect(layer.dt_bias, name("dt_bias").c_str(), {d.nheads}, {kF32}, dev);
  validate::expect_optional(layer.D, name("D").c_str(), {d.nheads}, {kF32}, dev);
  validate::expect(in.x, name("x").c_str(), {kAny, kAny, d.nheads, d.headdim}, {kF32, kBF16}, dev);
  const int64_t batch = in.x.shape[0], T = in.x.shape[1];
  check<ShapeError>(T >= 1 && T <= 8, op, " x: token axis ", T, ", expected 1..8");
  const DType t = in.x.dtype;
  validate::expect(in.dt, name("dt").c_str(), {batch, T, d.nheads}, {kF32, t}, dev);
  validate::expect(in.B, name("B").c_str(), {batch, T, d.ngroups, d.d_state}, {t}, dev);
  validate::expect(in.C, name("C").c_str(), {batch, T, d.ngroups, d.d_state}, {t}, dev);
  validate::expect_optional(in.z, name("z").c_str(), {batch, T, d.nheads, d.headdim}, {t}, dev);
  validate::expect(y, name("y").c_str(), {batch, T, d.nheads, d.headdim}, {t}, dev);
  validate::expect(state, name("state").c_str(), {kAny, d.nheads, d.headdim, d.d_state}, {kF32},
                   dev);
}

}  // namespace

void verify(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
            const Rows& rows, TensorView y) {
  const char* op = "mamba2.verify (cuda)";
  const Dims& d = layer.dims;
  StepParams p = token_params(layer, cache.state, in, rows, y, op);
  const int64_t R = cursors.config.rows();
  check<UnsupportedError>(R <= kMaxRing, op, ": ring length L = ", R, ", expected L <= ", kMaxRing,
                          " on CUDA");
  const DType ring = cache.ring_x.dtype;
  check<UnsupportedError>(ring == kF32 || in.x.dtype == kBF16, op,
                          ": ring_x is bfloat16 but the inputs are ", dtype_name(in.x.dtype),
                          ", expected a float32 ring (a bfloat16 ring is only a lossless copy of "
                          "bfloat16 inputs)");
  check<UnsupportedError>(d.headdim % 8 == 0, op, ": headdim = ", d.headdim,
                          ", expected a multiple of 8 (16-byte staging of x and z)");
  // ring_B in the ring dtype (the public API checks each ring tensor's dtype on its own)
  validate::expect(cache.ring_B, (std::string(op) + " ring_B").c_str(),
                   {cache.state.shape[0], d.ngroups, R, d.d_state}, {ring}, Device::kCUDA);
  check_aligned(cache.ring_x, op, "ring_x");
  check_aligned(cache.ring_B, op, "ring_B");
  check_aligned(in.x, op, "x");
  if (!in.z.empty()) check_aligned(in.z, op, "z");
  const std::vector<int32_t> ids = check_rows(rows, p.batch, cache.state.shape[0], p.Ty, op);
  check_cursor_values(cursors, rows, ids, p.Ty, op);
  if (p.batch == 0) return;
  p.R = static_cast<int32_t>(R);
  p.ring_x = cache.ring_x.data;
  p.ring_dt = cache.ring_dt.ptr<float>();
  p.ring_B = cache.ring_B.data;
  p.origin = cursors.origin.ptr<int32_t>();
  p.hist = cursors.h.ptr<int32_t>();
  p.is_flush = cursors.is_flush.ptr<int8_t>();
  const int K = padded_T(p.Ty);
  const int ring_bytes = static_cast<int>(dtype_size(ring));
  const int in_bytes = static_cast<int>(dtype_size(in.x.dtype));
  const VerifyPlan plan = plan_verify(d.headdim, d.d_state, p.heads_per_group, p.batch, p.R, K,
                                      ring_bytes, in_bytes, op);
  p.rows_per_block = plan.rows_per_block;
  p.nsplit = static_cast<int32_t>((d.headdim + plan.rows_per_block - 1) / plan.rows_per_block);
  p.heads_per_block = plan.heads_per_block;
  p.nchunks = p.heads_per_group / plan.heads_per_block;
  const int floats = plan.group ? VerifyGroupSmem(static_cast<int>(R), static_cast<int>(d.d_state),
                                                  plan.rows_per_block, plan.heads_per_block, K,
                                                  ring_bytes, in_bytes).total
                                : VerifySmem(static_cast<int>(R), static_cast<int>(d.d_state),
                                             plan.rows_per_block, K).total;
  const size_t smem = static_cast<size_t>(floats) * sizeof(float);
  check<UnsupportedError>(smem <= max_block_smem(), op, ": headdim ", d.headdim, " (ring L ", R,
                          ", ", plan.heads_per_block, " heads and ", plan.rows_per_block,
                          " rows per block) needs ", smem,
                          " bytes of shared memory per block, expected <= ", max_block_smem());
  const auto s = static_cast<cudaStream_t>(rows.stream);
  if (in.x.dtype == kF32)
    launch_verify<float, float>(p, d.d_state, K, plan.group, plan.l2ahead, plan.threads, smem, s);
  else if (ring == kBF16)
    launch_verify<bf16, bf16>(p, d.d_state, K, plan.group, plan.l2ahead, plan.threads, smem, s);
  else
    launch_verify<bf16, float>(p, d.d_state, K, plan.group, plan.l2ahead, plan.threads, smem, s);
}

void snapshot_verify(const Layer& layer, const TensorView& states, const Tokens& in,
                     const Rows& rows, const TensorView& snap_dst, TensorView y) {
  const char* op = "mamba2.snapshot_verify (cuda)";
  check_snapshot_tokens(layer, states, in, y, op);
  StepParams p = token_params(layer, states, in, rows, y, op);
  validate::expect(snap_dst, (std::string(op) + " snap_dst").c_str(), {p.batch, p.Ty},
                   {DType::kI32}, Device::kCUDA);
  const std::vector<int32_t> ids = check_rows(rows, p.batch, states.shape[0], p.Ty, op);
  check_snapshot_slots(rows, ids, snap_dst, states.shape[0], op);
  if (p.batch == 0) return;
  p.snap_dst = snap_dst.ptr<int32_t>();
  const int K = padded_T(p.Ty);
  const size_t smem =
      static_cast<size_t>(snapshot_smem_floats(p.P, static_cast<int>(layer.dims.d_state), K)) * 4;
  check<UnsupportedError>(smem <= max_block_smem(), op, ": headdim ", p.P, " needs ", smem,
                          " bytes of shared memory per block, expected <= ", max_block_smem());
  const auto s = static_cast<cudaStream_t>(rows.stream);
  with_N_K(layer.dims.d_state, K, op, [&](auto n, auto k) {
    constexpr int kN = decltype(n)::value, kK = decltype(k)::value;
    const dim3 grid(static_cast<unsigned>(p.H), static_cast<unsigned>(p.batch));
    if (in.x.dtype == kF32)
      launch_with_smem(snapshot_kernel<float, kN, kK>, grid, kSnapshotThreads, smem, s, p, op);
    else
      launch_with_smem(snapshot_kernel<bf16, kN, kK>, grid, kSnapshotThreads, smem, s, p, op);
  });
}

}  // namespace replayssm::cuda::mamba2
