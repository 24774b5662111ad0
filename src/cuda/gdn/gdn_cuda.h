// The CUDA backend of the GDN/KDA decode ops (include/replayssm/gdn.h): host launchers that
// validate their arguments (typed errors before anything is touched), pick a launch plan and
// enqueue the kernels on rows.stream. src/api/gdn.cpp dispatches here for CUDA tensors; tests and
// benchmarks may call these directly, e.g. to force a route or a plan.
//
// CUDA dtypes: q, k, v, a, b float32 or bfloat16 (one dtype), y that dtype; A_log, dt_bias
// float32; state/checkpoint float32, float16 or bfloat16 (float32 arithmetic, rounded to nearest
// even when stored); ring_u, ring_k, ring_g float32 (u in float32 so that long runs do not drift:
// every flush folds the stored u into the checkpoint; bench/NOTES_gdn.md). head_k_dim K 64 or 128,
// any head_v_dim V, ring length L <= 64, batch <= 65535; state, q, k, ring_u, ring_k, ring_g (and,
// for KDA, a and dt_bias) 16-byte aligned.
//
// Slot ids live on the device: ids outside [0, slots) are pad rows in the kernels (y = 0, nothing
// read or written). With Rows::check_device_ids (and the stream not capturing) the ids are copied
// to the host and checked first (SlotError). Cursor values are not copied: the kernels clamp them
// into the ring (origin mod R, 0 <= h <= R - 1), so a corrupt cursor gives wrong values for its
// own slot but never touches memory outside it.
#pragma once
#include <cstdint>

#include "replayssm/gdn.h"
#include "replayssm/ring.h"
#include "replayssm/tensor.h"

namespace replayssm::cuda::gdn {

using Dims = ::replayssm::gdn::Dims;
using Layer = ::replayssm::gdn::Layer;
using Tokens = ::replayssm::gdn::Tokens;
using Cache = ::replayssm::gdn::Cache;

/// How an ordinary replay row computes y (flush rows always materialise the state).
enum class Route : uint8_t {
  kAuto,            ///< chosen by plan_replay
  kOutputOnly,      ///< hk, hq from S0 and per-record scalars k^_j.e^E.k^, k^_j.e^E.q^ (no state
                    ///< formed)
  kStateAndOutput,  ///< fold the records into the checkpoint row in registers, then the
                    ///< conventional update (no state written)
};
const char* route_name(Route r);

/// A launch plan. Zero / kAuto / -1 fields are chosen by the dispatcher; tests and benchmarks set
/// them to force a variant.
struct Plan {
  Route route = Route::kAuto;  ///< replay only
  int rows_per_block = 0;      ///< V rows per block: V is split over ceil(V / rows) blocks
  int rows_per_thread = 0;     ///< 1..8 rows per thread (all requested at once)
  int prefetch_ring = -1;      ///< replay: 1 = stage all R ring rows with the checkpoint, without
                               ///< waiting for the cursor (latency-bound batches); 0 = live rows
  int bulk_copy = -1;          ///< 1 = state tiles moved by bulk copies (the SM's copy engine,
                               ///< one per warp pass, completing on mbarriers); 0 = per-thread
                               ///< 16-byte cp.async loads and streaming stores
  // replay kernel choice and the group kernel's shape (replay_group.cuh)
  int kernel = 0;           ///< replay: 1 = per-block kernel (replay.cuh), 2 = group kernel
                            ///< (needs V a multiple of 4); rows_per_thread 4 or 8 for it
  int heads_per_block = 0;  ///< group kernel: value heads of one key head per block (divides
                            ///< HV / H; 1 for KDA)
  int units_per_head = 0;   ///< group kernel: row units (4 warps x rows per pass x rows per
                            ///< thread rows) of each value head per block
  int stages = 0;           ///< group kernel: checkpoint units in flight per block, 1..4
  int flush_kernel = -1;    ///< group kernel, output-only route, default state mode:
                            ///< 1 = flush rows in a launch of their own (flush.cuh) after the
                            ///< ordinary rows' launch; 0 = inside the one launch of every row
  int early_exit = -1;      ///< with flush_kernel 1: 1 = the ordinary launch's blocks of a flush
                            ///< row leave before requesting its checkpoint (one cursor round trip
                            ///< first); 0 = after (the stages in flight are read and dropped)
  int overlap = -1;         ///< with flush_kernel 1 and early_exit 1: 1 = the flush launch
                            ///< starts while the ordinary launch's last blocks run (programmatic
                            ///< dependent launch, sm_90+); 0 = after it
  int flush_threads = 0;    ///< with flush_kernel 1: threads per block of the flush launch, 64,
                            ///< 128 or 256 (an item is that many / 32 warps' rows of one value
                            ///< head); 0 or -1 = the dispatcher's
  int flush_pipeline = -1;  ///< with flush_kernel 1: 1 = the pipelined flush kernel
                            ///< (flush_pipe.cuh: producer warps copy items two ahead while the
                            ///< others fold) where it applies (scalar gate, default state mode,
                            ///< L <= 32 and its shared memory fitting two blocks per SM: fp32
                            ///< K = 128 to L 17, 16-bit to L 31), flush.cuh elsewhere;
                            ///< 0 = flush.cuh; -1 = auto
};

/// The dispatcher's choice for a conventional step (every field resolved). Tuning runs may
/// override fields of every conventional step through the environment:
/// RSSM_GDN_CONVENTIONAL_PLAN="rpt=8,rows=64,bulk=1" (any subset), applied where the step resolves
/// its plan (not here), checked like a forced plan.
Plan plan_conventional(const Dims& dims, int64_t batch, DType state_dtype);
/// The dispatcher's choice for a replay step with ring length L (every field resolved) whose
/// ordinary rows read state_dtype: float32, float16 or bfloat16 (a checkpoint or a 16-bit read
/// copy), or uint8 for a quantised read copy (fp32/fp8, fp32/nvfp4: lanes of 16-element chunks).
/// Tuning runs may override fields through the environment: RSSM_GDN_REPLAY_PLAN="kernel=2,
/// rpt=4,hpb=2,uph=4,stages=3,prefetch=0,flush=0,exit=1,pdl=1,fthreads=128,fpipe=0" (any subset;
/// pdl: overlap, fthreads: flush_threads, fpipe: flush_pipeline), checked like a forced plan.
Plan plan_replay(const Dims& dims, int64_t batch, int32_t L, DType state_dtype);

/// gdn::conventional_step on CUDA tensors.
void conventional_step(const Layer& layer, Cache& cache, const Tokens& in, const Rows& rows,
                       TensorView y, const Plan& plan = {});

/// gdn::replay_step on CUDA tensors: per row, cursors.is_flush (read on the device) selects the
/// flush or the ordinary step, so one set of launches (and one CUDA graph) serves every mix of
/// rows: the ordinary and the flush launch (split modes: the first over the read copy, the second
/// over the fp32 checkpoint; quantised copies then a third that encodes the flushed slots'
/// copies). Every argument and the plans of all its launches are checked before any is enqueued.
void replay_step(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
                 const Rows& rows, TensorView y, const Plan& plan = {});

/// gdn::verify on CUDA tensors (verify.cuh), after the public API's checks: q, k, v, a, b, y with
/// the token axis ([batch, T, ...]); fp32 checkpoint; K 64 or 128, V a multiple of 4, L <= 64,
/// T <= cursors.config.T <= 8. One launch per step for every mix of rows (flush or not, any T_b,
/// pad rows): cursors, counts and slot ids are read on the device, so one CUDA graph serves
/// every step.
void verify(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
            const Rows& rows, TensorView y);

/// The peers' speculative baseline (snapshot.cuh), for side-by-side measurement: row b runs the
/// conventional step T_b times from states[rows.slot_ids[b]] and writes the state after token s
/// to states[snap_dst[b, s]] (a full snapshot per token; ids outside the pool skip the write).
/// states [slots, HV, V, K] float32; q, k, v, a, b, y [batch, T, ...] (T <= 8); snap_dst
/// [batch, T] int32; rows.num_tokens optional. y past T_b and of pad rows is 0. Rollback:
/// cuda::snapshot_select. Errors: ShapeError / DTypeError / UnsupportedError / SlotError.
void snapshot_verify(const Layer& layer, const TensorView& states, const Tokens& in,
                     const Rows& rows, const TensorView& snap_dst, TensorView y);

/// gdn::reset_slots on CUDA tensors: zero the checkpoints of the rows' slots.
void reset_slots(Cache& cache, const Rows& rows);

}  // namespace replayssm::cuda::gdn
