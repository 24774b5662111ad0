// The kernel argument block of every Mamba-2 decode kernel (passed by value), filled by the host
// launcher after validation. Plain data, usable from host and device code.
#pragma once
#include <cstdint>

#include "cuda/common/sr_keys.h"

namespace replayssm::cuda::mamba2 {

struct StepParams {
  // sizes
  int32_t H = 0, P = 0, G = 0, heads_per_group = 0, slots = 0, batch = 0;
  int32_t R = 0;  ///< ring rows (replay)
  // block decomposition: a block owns rows_per_block rows of headdim (nsplit blocks cover P) of
  // heads_per_block heads of one group (the replay group kernel; 1 otherwise), nchunks blocks
  // per group
  int32_t rows_per_block = 0, nsplit = 0, heads_per_block = 1, nchunks = 1;
  // inputs (x, B, C, z in the input dtype; dt float32 or the input dtype), outputs
  const void* x = nullptr;
  const void* dt = nullptr;
  const void* B = nullptr;
  const void* C = nullptr;
  const void* z = nullptr;
  const float* A_log = nullptr;
  const float* dt_bias = nullptr;
  const float* D = nullptr;
  void* state = nullptr;  ///< state (conventional) or checkpoint S0 (replay)
  void* y = nullptr;
  const int32_t* slot_ids = nullptr;
  // replay: ring and cursors
  void* ring_x = nullptr;
  float* ring_dt = nullptr;
  void* ring_B = nullptr;
  const int32_t* origin = nullptr;
  const int32_t* hist = nullptr;
  const int8_t* is_flush = nullptr;
  // verify / snapshot baseline: the token axis of x, dt, B, C, z and y, and tokens per row
  int32_t Ty = 1;
  const int32_t* num_tokens = nullptr;  ///< [batch] 1..Ty, or none (every row feeds Ty)
  const int32_t* snap_dst = nullptr;    ///< snapshot baseline: [batch, Ty] slot of token s's state
  // flags
  bool dt_f32 = true, softplus = true, has_D = false, has_z = false;
  bool state_route = false;    ///< replay ordinary rows materialise the state (else output-only)
  bool prefetch_ring = false;  ///< stage all R ring rows without waiting for the cursors
  bool group = false;          ///< replay: the group kernel (replay_group.cuh), else replay.cuh
  // split state modes fp32/bf16, fp32/fp16 (precision.h): two launches per step, one over the
  // 16-bit read copy for the ordinary rows, one over the fp32 checkpoint for the flush rows, which
  // also writes the read copy (rounded from the new fp32 state). Group kernel only.
  int8_t only = 0;         ///< 0 every row; 1 ordinary rows only; 2 flush rows only
  bool early_exit = false;  ///< only = 1: a flush row leaves before its checkpoint is requested
  void* copy = nullptr;    ///< flush rows: the read copy [slots, H, P, N] to write (or none)
  bool copy_f16 = false;   ///< the read copy is float16 (else bfloat16)
  // quantised read copies (fp32/nvfp4, fp32/fp8; the ordinary launch, only = 1): `state` holds the
  // codes ([slots, H, P, N/2] nvfp4 / [slots, H, P, N] e4m3 bytes) and these their scales
  const void* read_scales = nullptr;   ///< nvfp4: E4M3 block scales [slots, H, P, N/16] uint8;
                                       ///< fp8: row scales [slots, H, P] float32
  const float* read_global = nullptr;  ///< nvfp4: global scales [slots, H] float32
  // fp16sr/fp16sr: the float16 checkpoint's writes (conventional, flush) rounded stochastically
  SrKeysDev sr;
};

}  // namespace replayssm::cuda::mamba2
