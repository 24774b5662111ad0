// Host side of gdn::verify on CUDA (verify.cuh). The public API (src/api/gdn.cpp) has checked
// shapes, dtypes, the ring and the cursors' layout before this is reached; here the CUDA limits
// and the device-resident rows are checked.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/validate.h"
#include "cuda/common/check.cuh"
#include "cuda/common/memory.h"
#include "cuda/common/snapshot_select.h"
#include "cuda/common/dtypes.cuh"
#include "cuda/common/launch.cuh"
#include "cuda/common/rows.h"
#include "cuda/gdn/gdn_cuda.h"
#include "cuda/gdn/snapshot.cuh"
#include "cuda/gdn/verify.cuh"
#include "replayssm/errors.h"

namespace replayssm::cuda::gdn {
namespace {

constexpr int64_t kMaxRing = 64;
constexpr int64_t kMaxBatch = 65535;

template <class TIn, int K, bool KDA>
void launch_K(const StepParams& p, int KT, size_t smem, cudaStream_t s, const char* op) {
  auto go = [&](auto kernel) {
#ifdef RSSM_BLOCK_TIMELINE
    static const char* const labels[] = {"issue", "wait",     "prefix", "coef", "solve",
                                         "phase3", "epilogue", "-",      "-"};
    timeline::report_at_exit("gdn::verify_kernel (class 1: flush rows with history)", labels);
#endif
    launch_with_smem(kernel, dim3(static_cast<unsigned>(p.HV), static_cast<unsigned>(p.batch)),
                     kVerifyThreads, smem, s, p, op);
  };
  switch (KT) {
    case 1: go(verify_kernel<TIn, K, 1, KDA>); break;
    case 2: go(verify_kernel<TIn, K, 2, KDA>); break;
    case 4: go(verify_kernel<TIn, K, 4, KDA>); break;
    default: go(verify_kernel<TIn, K, 8, KDA>); break;
  }
}

template <class TIn>
void launch_in(const StepParams& p, int64_t K, bool kda, int KT, size_t smem, cudaStream_t s,
               const char* op) {
  if (K == 64)
    return kda ? launch_K<TIn, 64, true>(p, KT, smem, s, op) : launch_K<TIn, 64, false>(p, KT, smem, s, op);
  return kda ? launch_K<TIn, 128, true>(p, KT, smem, s, op) : launch_K<TIn, 128, false>(p, KT, smem, s, op);
}

/// The launch arguments shared by verify and the snapshot baseline.
StepParams token_params(const Layer& layer, const TensorView& state, const Tokens& in,
                        const Rows& rows, const TensorView& y) {
  const Dims& d = layer.dims;
  StepParams p;
  p.H = static_cast<int32_t>(d.num_k_heads);
  p.HV = static_cast<int32_t>(d.num_v_heads);
  p.K = static_cast<int32_t>(d.head_k_dim);
  p.V = static_cast<int32_t>(d.head_v_dim);
  p.group = p.HV / p.H;
  p.slots = static_cast<int32_t>(std::min<int64_t>(state.shape[0], INT32_MAX));
  p.batch = static_cast<int32_t>(in.q.shape[0]);
  p.Ty = static_cast<int32_t>(in.q.shape[1]);
  p.q = in.q.data, p.k = in.k.data, p.v = in.v.data, p.a = in.a.data, p.b = in.b.data;
  p.A_log = layer.A_log.ptr<float>();
  p.dt_bias = layer.dt_bias.ptr<float>();
  p.scale = layer.scale != 0.0f ? layer.scale : 1.0f / std::sqrt(static_cast<float>(d.head_k_dim));
  p.state = state.data;
  p.y = y.data;
  p.slot_ids = rows.slot_ids.ptr<int32_t>();
  p.num_tokens = rows.num_tokens.empty() ? nullptr : rows.num_tokens.ptr<int32_t>();
  p.beta_bf16 = layer.beta_bf16;
  return p;
}

}  // namespace

void verify(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
            const Rows& rows, TensorView y) {
  const char* op = "gdn.verify (cuda)";
  const Dims& d = layer.dims;
  const bool kda = d.gate == ::replayssm::gdn::Gate::kChannel;
  check<UnsupportedError>(d.head_k_dim == 64 || d.head_k_dim == 128, op, ": head_k_dim K = ",
                          d.head_k_dim, ", expected 64 or 128 (the K values compiled for CUDA)");
  check<UnsupportedError>(d.head_v_dim % 4 == 0, op, ": head_v_dim V = ", d.head_v_dim,
                          ", expected a multiple of 4 (16-byte staging of u and v)");
  check<UnsupportedError>(cache.state.dtype == DType::kF32, op, ": state dtype ",
                          dtype_name(cache.state.dtype),
                          ", expected float32 (speculative steps keep an fp32 state)");
  const int64_t R = cursors.config.rows();
  check<UnsupportedError>(R <= kMaxRing, op, ": ring length L = ", R, ", expected L <= ",
                          kMaxRing, " on CUDA");
  const int64_t batch = in.q.shape[0];
  check<UnsupportedError>(batch <= kMaxBatch, op, ": batch ", batch, ", expected <= ", kMaxBatch);
  check_aligned(cache.state, op, "state");
  check_aligned(cache.ring_u, op, "ring_u");
  check_aligned(cache.ring_k, op, "ring_k");
  check_aligned(cache.ring_g, op, "ring_g");
  check_aligned(in.v, op, "v");
  const std::vector<int32_t> ids = check_rows(rows, batch, cache.state.shape[0], in.q.shape[1], op);
  check_cursor_values(cursors, rows, ids, in.q.shape[1], op);
  if (batch == 0) return;

  StepParams p = token_params(layer, cache.state, in, rows, y);
  p.R = static_cast<int32_t>(R);
  p.ring_u = cache.ring_u.ptr<float>();
  p.ring_k = cache.ring_k.ptr<float>();
  p.ring_g = cache.ring_g.ptr<float>();
  p.origin = cursors.origin.ptr<int32_t>();
  p.hist = cursors.h.ptr<int32_t>();
  p.is_flush = cursors.is_flush.ptr<int8_t>();

  const int KT = p.Ty <= 1 ? 1 : p.Ty <= 2 ? 2 : p.Ty <= 4 ? 4 : 8;
  const int GW = kda ? p.K : 1;
  // The stage where it fits and keeps the blocks per SM (registers bound them to
  // verify_min_blocks(KT)); very wide heads or long rings at KT = 8 run without it.
  const auto bytes = [&](bool staged) {
    return static_cast<size_t>(VerifySmem(p.R, p.K, p.V, KT, GW, staged).total) * sizeof(float);
  };
  const auto blocks = [&](size_t b) {
    return std::min<int64_t>(verify_min_blocks(KT), blocks_per_sm_by_smem(static_cast<int64_t>(b)));
  };
  p.staged = verify_staged(KT) > 0 && bytes(true) <= max_block_smem() &&
             blocks(bytes(true)) >= blocks(bytes(false));
  const size_t smem = bytes(p.staged);
  check<UnsupportedError>(smem <= max_block_smem(), op, ": head_v_dim ", d.head_v_dim, " needs ", smem,
                          " bytes of shared memory per block, expected <= ", max_block_smem());
  const auto s = static_cast<cudaStream_t>(rows.stream);
  if (in.q.dtype == DType::kF32)
    launch_in<float>(p, d.head_k_dim, kda, KT, smem, s, op);
  else
    launch_in<bf16>(p, d.head_k_dim, kda, KT, smem, s, op);
}

void snapshot_verify(const Layer& layer, const TensorView& states, const Tokens& in,
                     const Rows& rows, const TensorView& snap_dst, TensorView y) {
  const char* op = "gdn.snapshot_verify (cuda)";
  const Dims& d = layer.dims;
  const bool kda = d.gate == ::replayssm::gdn::Gate::kChannel;
  const int64_t H = d.num_k_heads, HV = d.num_v_heads, K = d.head_k_dim, V = d.head_v_dim;
  check<ConfigError>(H >= 1 && HV % H == 0, op, ": num_v_heads HV = ", HV,
                     " is not a multiple of num_k_heads H = ", H);
  check<UnsupportedError>(K == 64 || K == 128, op, ": head_k_dim K = ", K, ", expected 64 or 128");
  const Device dev = Device::kCUDA;
  using validate::kAny;
  constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16;
  auto name = [&](const char* n) { return std::string(op) + " " + n; };
  validate::expect(layer.A_log, name("A_log").c_str(), {HV}, {kF32}, dev);
  if (kda)
    validate::expect(layer.dt_bias, name("dt_bias").c_str(), {HV, K}, {kF32}, dev);
  else
    validate::expect(layer.dt_bias, name("dt_bias").c_str(), {HV}, {kF32}, dev);
  validate::expect(in.q, name("q").c_str(), {kAny, kAny, H, K}, {kF32, kBF16}, dev);
  const int64_t batch = in.q.shape[0], T = in.q.shape[1];
  check<ShapeError>(T >= 1 && T <= 8, op, " q: token axis ", T, ", expected 1..8");
  const DType t = in.q.dtype;
  validate::expect(in.k, name("k").c_str(), {batch, T, H, K}, {t}, dev);
  validate::expect(in.v, name("v").c_str(), {batch, T, HV, V}, {t}, dev);
  if (kda)
    validate::expect(in.a, name("a").c_str(), {batch, T, HV, K}, {t}, dev);
  else
    validate::expect(in.a, name("a").c_str(), {batch, T, HV}, {t}, dev);
  validate::expect(in.b, name("b").c_str(), {batch, T, HV}, {t}, dev);
  validate::expect(y, name("y").c_str(), {batch, T, HV, V}, {t}, dev);
  validate::expect(states, name("state").c_str(), {kAny, HV, V, K}, {kF32}, dev);
  validate::expect(snap_dst, name("snap_dst").c_str(), {batch, T}, {DType::kI32}, dev);
  check<UnsupportedError>(batch <= kMaxBatch, op, ": batch ", batch, ", expected <= ", kMaxBatch);
  check_aligned(states, op, "state");
  check_aligned(in.q, op, "q");
  check_aligned(in.k, op, "k");
  if (kda) check_aligned(in.a, op, "a"), check_aligned(layer.dt_bias, op, "dt_bias");
  const std::vector<int32_t> ids = check_rows(rows, batch, states.shape[0], T, op);
  check_snapshot_slots(rows, ids, snap_dst, states.shape[0], op);
  if (batch == 0) return;
  StepParams p = token_params(layer, states, in, rows, y);
  p.snap_dst = snap_dst.ptr<int32_t>();
  const size_t smem = static_cast<size_t>(V * K) * sizeof(float);
  check<UnsupportedError>(smem <= max_block_smem(), op, ": head_v_dim ", V, " needs ", smem,
                          " bytes of shared memory per block, expected <= ", max_block_smem());
  const auto s = static_cast<cudaStream_t>(rows.stream);
  auto go = [&](auto kernel) {
    launch_with_smem(kernel, dim3(static_cast<unsigned>(HV), static_cast<unsigned>(batch)),
                     kSnapshotThreads, smem, s, p, op);
  };
  const bool f32 = t == kF32;
  if (K == 64) {
    if (kda) f32 ? go(snapshot_kernel<float, 64, true>) : go(snapshot_kernel<bf16, 64, true>);
    else f32 ? go(snapshot_kernel<float, 64, false>) : go(snapshot_kernel<bf16, 64, false>);
  } else {
    if (kda) f32 ? go(snapshot_kernel<float, 128, true>) : go(snapshot_kernel<bf16, 128, true>);
    else f32 ? go(snapshot_kernel<float, 128, false>) : go(snapshot_kernel<bf16, 128, false>);
  }
}

}  // namespace replayssm::cuda::gdn
