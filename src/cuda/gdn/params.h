// The kernel argument block of the GDN/KDA decode kernels (passed by value), filled by the host
// launcher after validation. Plain data, usable from host and device code.
#pragma once
#include <cstdint>

#include "cuda/common/sr_keys.h"

namespace replayssm::cuda::gdn {

struct StepParams {
  // sizes: H key heads, HV value heads (group = HV / H value heads per key head), K, V
  int32_t H = 0, HV = 0, K = 0, V = 0, group = 1, slots = 0, batch = 0;
  int32_t R = 0;  ///< ring rows (replay)
  // block decomposition: a block owns rows_per_block rows of V of one (batch row, value head);
  // nsplit blocks cover V; a thread owns up to rows_per_thread (<= kMaxRowsPerThread) rows
  int32_t rows_per_block = 0, nsplit = 1, rows_per_thread = 1;
  // inputs (q, k, v, a, b in the input dtype), parameters, outputs
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* a = nullptr;
  const void* b = nullptr;
  const float* A_log = nullptr;
  const float* dt_bias = nullptr;  ///< [HV] (GDN) or [HV, K] (KDA)
  float scale = 0.0f;              ///< q scale, resolved (never 0)
  void* state = nullptr;           ///< state (conventional) or checkpoint S0 (replay)
  void* y = nullptr;
  const int32_t* slot_ids = nullptr;
  // replay: ring (float32) and cursors
  float* ring_u = nullptr;  ///< [slots, HV, R, V]
  float* ring_k = nullptr;  ///< [slots, H, R, K]
  float* ring_g = nullptr;  ///< [slots, HV, R] (GDN) or [slots, HV, R, K] (KDA)
  const int32_t* origin = nullptr;
  const int32_t* hist = nullptr;
  const int8_t* is_flush = nullptr;
  // verify: the token axis of q, k, v, a, b and y, and tokens per row
  int32_t Ty = 1;
  const int32_t* num_tokens = nullptr;  ///< [batch] 1..Ty, or none (every row feeds Ty)
  const int32_t* snap_dst = nullptr;    ///< snapshot baseline: [batch, Ty] slot of token s's state
  bool staged = false;  ///< verify at KT = 8: checkpoint groups staged in shared memory (verify.cuh)
  // flags
  bool beta_bf16 = false;
  bool state_route = false;    ///< replay ordinary rows materialise the state (else output-only)
  bool prefetch_ring = false;  ///< stage all R ring rows without waiting for the cursor
  bool bulk_copy = false;      ///< move state tiles with bulk copies (else per-thread cp.async)
  // replay group kernel (replay_group.cuh): a block owns heads_per_block value heads of one key
  // head (nvc = group / heads_per_block blocks per key head) and units_per_head units of rows of
  // each (nru blocks per value head), through `stages` shared-memory stages
  bool group_kernel = false;
  int32_t heads_per_block = 1, units_per_head = 1, nvc = 1, nru = 1, stages = 2;
  // split state modes fp32/bf16, fp32/fp16 (precision.h): two launches per step, the ordinary
  // rows over the 16-bit read copy (group kernel; they also append v and beta to ring_v /
  // ring_beta), the flush rows over the checkpoint (flush.cuh with EXACT: every record's u
  // recomputed from the checkpoint and (k^, g, beta, v), so nothing read from the copy enters
  // the recurrence), which also write the copy
  int8_t only = 0;            ///< 0 every row; 1 ordinary rows only; 2 flush rows only (flush.cuh)
  bool early_exit = false;    ///< only = 1: a flush row leaves before its checkpoint is requested
  bool flush_pipe = false;    ///< only = 2: the pipelined flush kernel (flush_pipe.cuh)
  bool exact_u = false;       ///< only = 2: recompute every u (flush.cuh EXACT; split modes whose
                              ///< ordinary rows read a copy: fp32/* and fp16sr/nvfp4)
  void* copy = nullptr;       ///< flush rows: the read copy [slots, HV, V, K] to write
  bool copy_f16 = false;      ///< the read copy is float16 (else bfloat16)
  float* ring_v = nullptr;    ///< [slots, HV, R, V] (split modes)
  float* ring_beta = nullptr; ///< [slots, HV, R] (split modes)
  // split modes fp32/fp8 and fp32/nvfp4: the ordinary launch reads `state` as the quantised read
  // copy (codes [slots, HV, V, K] e4m3, or [slots, HV, V, K/2] packed E2M1) with its scales
  const void* read_scales = nullptr;  ///< fp8: [slots, HV, V] float32; nvfp4: [.., V, K/16] E4M3
  const float* read_global = nullptr; ///< nvfp4: [slots, HV] float32 global scales
  // fp16sr/fp16sr: the float16 checkpoint's writes (conventional, flush) rounded stochastically
  SrKeysDev sr;
};

}  // namespace replayssm::cuda::gdn
