// The CUDA backend of the Mamba-2 decode ops (include/replayssm/mamba2.h): host launchers that
// validate their arguments (typed errors before anything is touched), pick a launch plan and
// enqueue the kernels on rows.stream. src/api/mamba2.cpp dispatches here for CUDA tensors; tests
// and benchmarks may call these directly, e.g. to force a route or a plan.
//
// CUDA dtypes: x, B, C, z float32 or bfloat16 (one dtype), dt float32 or that dtype, y that dtype;
// A_log, dt_bias, D float32; state/checkpoint float32, float16 or bfloat16 (float32 arithmetic,
// rounded to nearest even when stored); ring_x / ring_B float32, or bfloat16 when the inputs are
// bfloat16 (a lossless copy); ring_dt float32. d_state 64 or 128, ring length L <= 64, batch
// <= 65535; state, B, C and ring_B 16-byte aligned.
//
// Slot ids live on the device: ids outside [0, slots) are pad rows in the kernels (y = 0, nothing
// read or written). With Rows::check_device_ids (and the stream not capturing) the ids are copied
// to the host and checked first (SlotError). Cursor values are not copied: the kernels clamp them
// into the ring (origin mod R, 0 <= h <= R - 1), so a corrupt cursor gives wrong values for its
// own slot but never touches memory outside it.
#pragma once
#include <cstdint>

#include "replayssm/mamba2.h"
#include "replayssm/ring.h"
#include "replayssm/tensor.h"

namespace replayssm::cuda::mamba2 {

using Dims = ::replayssm::mamba2::Dims;
using Layer = ::replayssm::mamba2::Layer;
using Tokens = ::replayssm::mamba2::Tokens;
using Cache = ::replayssm::mamba2::Cache;

/// How an ordinary replay row computes y (flush rows always materialise the state).
enum class Route : uint8_t {
  kAuto,        ///< chosen per shape, batch and L (plan_replay)
  kOutputOnly,  ///< y = ā·(S0·C) + Σ s_j·(B_j·C)·x_j: one dot B_j·C per record of the group
  kStateAndOutput,  ///< materialise S_h = ā·S0 + Σ c_j·x_j·B_jᵀ in registers, then y = S·C
};
const char* route_name(Route r);

/// A launch plan. Zero / kAuto / -1 fields are chosen by the dispatcher; tests and benchmarks set
/// them to force a variant.
struct Plan {
  Route route = Route::kAuto;  ///< replay only
  int heads_per_block = 0;     ///< replay: heads of one group per block (divides H / G); the
                               ///< group kernel (rows_per_block a multiple of 8) runs any, the
                               ///< per-head kernel 1
  int rows_per_block = 0;      ///< headdim rows per block: P is split over ceil(P / rows) blocks
  int rows_per_thread = 0;     ///< conventional: 1, 2, 4 or 8; replay: 4, or 8 with a 4-byte
                               ///< checkpoint
  int prefetch_ring = -1;      ///< replay: 1 = stage all R ring rows with the checkpoint, without
                               ///< waiting for the cursors (latency-bound batches); 0 = live rows
  int flush_kernel = -1;       ///< replay on the group kernel, output-only route: 1 = flush rows
                               ///< fold in a launch of their own (flush.cuh), after the ordinary
                               ///< rows' launch; 0 = inside the one launch of every row
  int early_exit = -1;         ///< with flush_kernel 1: 1 = the ordinary launch's blocks of a
                               ///< flush row leave before requesting its checkpoint (one cursor
                               ///< round trip first); 0 = after (two stages read and dropped)
  int overlap = -1;            ///< with flush_kernel 1 and early_exit 1: 1 = the flush launch
                               ///< starts while the ordinary launch's last blocks run
                               ///< (programmatic dependent launch, sm_90+); 0 = after it
  int flush_split = 0;         ///< with flush_kernel 1: pieces per head of the flush launch's
                               ///< items, at least (rounded to whole row units; 0 = auto: whole
                               ///< heads where their rows fit kFlushThreads)
};

/// The dispatcher's choice for a conventional step (every field resolved). Tuning runs may force
/// fields of every conventional step through the environment: RSSM_MAMBA2_CONVENTIONAL_PLAN=
/// "rpt=2,rows=8" (either), applied where the step resolves its plan, checked like a forced plan.
Plan plan_conventional(const Dims& dims, int64_t batch, DType state_dtype);
/// The dispatcher's choice for a replay step with ring length L (every field resolved). Tuning
/// runs may override fields through the environment: RSSM_MAMBA2_REPLAY_PLAN="rpt=8,split=2,
/// prefetch=0,hpb=4,flush=0,exit=1,pdl=1,fsplit=2" (any subset; split = blocks per head; pdl:
/// overlap; fsplit: flush_split).
Plan plan_replay(const Dims& dims, int64_t batch, int32_t L, DType state_dtype,
                 DType ring_dtype = DType::kBF16);
/// plan_replay for a launch whose tiles hold state_bits per element: 32 or 16 (the checkpoint or
/// a 16-bit read copy), 8 (an fp8 read copy) or 4 (nvfp4).
Plan plan_replay_bits(const Dims& dims, int64_t batch, int32_t L, int state_bits,
                      DType ring_dtype = DType::kBF16);

/// mamba2::conventional_step on CUDA tensors.
void conventional_step(const Layer& layer, Cache& cache, const Tokens& in, const Rows& rows,
                       TensorView y, const Plan& plan = {});

/// mamba2::replay_step on CUDA tensors: per row, cursors.is_flush (read on the device) selects the
/// flush or the ordinary step, so one launch (and one CUDA graph) serves every mix of rows.
/// Split modes fp32/bf16 and fp32/fp16 (cache.mode, precision.h): two launches per step (both
/// captured by one graph): ordinary rows read only the 16-bit read copy (cache.read.values,
/// [slots, H, P, N] bfloat16 / float16), flush rows fold into the fp32 checkpoint (cache.state)
/// and write the read copy rounded (nearest even) from the same new fp32 state; nothing read
/// from the copy enters the recurrence. fp32/nvfp4 and fp32/fp8: the ordinary launch reads the
/// quantised copy (cache.read: codes and scales as precision.h lays them out; values 16-byte,
/// scales 4-byte aligned), the flush launch folds into the fp32 checkpoint, and a third launch
/// encodes the flushed slots' new checkpoints into the copy exactly as codecs::nvfp4_encode /
/// fp8_encode would. Other modes: UnsupportedError naming the mode.
void replay_step(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
                 const Rows& rows, TensorView y, const Plan& plan = {});

/// mamba2::verify on CUDA tensors (verify.cuh), after the public API's checks: x, B, C, z, y
/// [batch, T, ...] and dt [batch, T, H] with the token axis; fp32 checkpoint; ring as replay_step
/// (bfloat16 only as a copy of bfloat16 inputs), L <= 64; T <= cursors.config.T <= 8.
/// One launch per step for every mix of rows (flush or not, any T_b, pad rows): the cursors,
/// counts and slot ids are read on the device, so one CUDA graph serves every step.
void verify(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
            const Rows& rows, TensorView y);

/// The peers' speculative baseline (snapshot.cuh), for side-by-side measurement: row b runs the
/// conventional step T_b times from states[rows.slot_ids[b]] and writes the state after token s
/// to states[snap_dst[b, s]] (a full snapshot per token; ids outside the pool skip the write).
/// states [slots, H, P, N] float32; x, B, C, z, y [batch, T, ...], dt [batch, T, H] (T <= 8);
/// snap_dst [batch, T] int32; rows.num_tokens optional (1..T). y past T_b is 0; pad rows y = 0.
/// Errors: ShapeError / DTypeError / UnsupportedError / SlotError as the other ops.
void snapshot_verify(const Layer& layer, const TensorView& states, const Tokens& in,
                     const Rows& rows, const TensorView& snap_dst, TensorView y);
/// The baseline's rollback is cuda::snapshot_select (common/snapshot_select.h).

/// mamba2::reset_slots on CUDA tensors: zero the checkpoints of the rows' slots.
void reset_slots(Cache& cache, const Rows& rows);

}  // namespace replayssm::cuda::mamba2
