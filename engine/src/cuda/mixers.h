// The CUDA counterparts of model/mixer.h: the same layer kinds, loaded from the same weight
// loaders (model/weights.h) and run over device buffers. The interface differs from the CPU Mixer
// in three ways: the input is the bf16 normalised residual (the GEMMs' input type), the output is
// accumulated into the fp32 residual stream (the out_proj / o_proj / down_proj GEMM adds it, so no
// separate residual add), and the rows' slot ids and positions live on the device, so a whole
// step can be captured into a CUDA graph.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

#include "cuda/arena.h"
#include "cuda/blas.h"
#include "cuda/kernels.h"
#include "replayssm/engine/checkpoint.h"
#include "replayssm/engine/config.h"
#include "replayssm/engine/model.h"
#include "replayssm/precision.h"
#include "replayssm/ring.h"

namespace replayssm::engine::cuda {

/// The rows of one step, all device-resident. A decode step feeds one token per row (T = 1); a
/// speculative verify step feeds ntok[b] (1..T) tokens to row b (the caller's pad rows never
/// reach the device), laid out padded: the activation rows ("tokens") are b * T + t, those with
/// t >= ntok[b] unused.
struct DeviceStep {
  int64_t n = 0;                       ///< rows
  int64_t T = 1;                       ///< token axis
  int64_t tokens = 0;                  ///< activation rows: n * T
  bool speculative = false;            ///< a verify step (SSM layers run verify; accept() follows)
  /// slot ids int32 [n] on the device (+ num_tokens [n] when speculative), the stream, no host
  /// checks
  Rows rows;
  const int32_t* slots = nullptr;      ///< = rows.slot_ids data
  const int32_t* ntok = nullptr;       ///< [n] tokens per row (speculative), else nullptr
  const int32_t* positions = nullptr;  ///< [max_slots] position of each slot's current token
  /// [tokens] slot of each activation row (-1: unused) and its position; decode steps: slots
  /// and nullptr (positions[slot]).
  const int32_t* tok_slots = nullptr;
  const int32_t* tok_pos = nullptr;
  cudaStream_t stream = nullptr;
  Blas* blas = nullptr;
  char* scratch = nullptr;  ///< shared by the mixers (they run one after another)
};

/// What every CUDA layer shares: the sizes, the SSM mode and the device ring cursors (replay;
/// committed once per step by the model after all layers ran), and the device memory owner.
struct CudaShared {
  SsmMode mode = SsmMode::kReplay;
  RingCursors cursors;  ///< device views
  double dt_floor = 0.0;
  DType state_dtype = DType::kF32;  ///< SSM state / checkpoint storage (ModelOptions::state)
  /// State precision mode of the SSM layers as requested (ModelOptions::state): what the
  /// library's CUDA kernels run natively, or else emulated (state_emulation.h).
  StateMode state_mode{};
  int64_t ssm_layers = 0;  ///< SSM layers built so far (the SR seeds' layer index)
  int64_t slots = 0, context = 0;
  /// Verify steps' T (ModelOptions::spec_T; 0: none) and the most activation rows of a step
  /// (slots * max(1, spec_T)): what the step scratch is sized for.
  int32_t spec_T = 0;
  int64_t max_tokens = 0;
  /// The snapshot baseline (conventional mode with verify steps; kernels.h snapshot_rows): each
  /// SSM layer's state pool holds spec_T + 1 buffers per slot; the model fills, per step, the
  /// rows' current buffers snap_src [n] and their tokens' snapshot buffers snap_dst [n, T]; every
  /// layer uses the same.
  int32_t *snap_src = nullptr, *snap_dst = nullptr;
  DeviceArena* arena = nullptr;

  bool snapshots() const { return mode == SsmMode::kConventional && spec_T > 0; }
  /// State buffers per slot in an SSM layer's pool.
  int32_t state_buffers() const { return snapshots() ? spec_T + 1 : 1; }
};

/// Device memory for n SSM state elements of `dtype` (float32, or 16-bit bf16 / fp16).
inline void* alloc_state(DeviceArena& a, DType dtype, int64_t n) {
  if (dtype == DType::kF32) return a.alloc_n<float>(n);
  return a.alloc_n<uint16_t>(n);
}

/// A split mode's read copy of a [S, heads, rows, n] state in format f (bf16, fp16, fp8 or nvfp4),
/// values and scales in precision.h's layout; the library's reset_slots clears it.
inline StateBuffer alloc_read_copy(DeviceArena& a, StateFormat f, int64_t S, int64_t heads,
                                   int64_t rows, int64_t n) {
  const DType u8 = DType::kU8, f32 = DType::kF32;
  StateBuffer b;
  if (f == StateFormat::kNvfp4) {
    b.values = device_view(a.alloc_n<uint8_t>(S * heads * rows * n / 2), u8, {S, heads, rows, n / 2});
    b.scales.blocks =
        device_view(a.alloc_n<uint8_t>(S * heads * rows * n / 16), u8, {S, heads, rows, n / 16});
    b.scales.global = device_view(a.alloc_n<float>(S * heads), f32, {S, heads});
  } else if (f == StateFormat::kFp8) {
    b.values = device_view(a.alloc_n<uint8_t>(S * heads * rows * n), u8, {S, heads, rows, n});
    b.scales.rows = device_view(a.alloc_n<float>(S * heads * rows), f32, {S, heads, rows});
  } else {
    const DType rd = f == StateFormat::kBf16 ? DType::kBF16 : DType::kF16;
    b.values = device_view(alloc_state(a, rd, S * heads * rows * n), rd, {S, heads, rows, n});
  }
  return b;
}

class CudaMixer {
 public:
  virtual ~CudaMixer() = default;
  /// residual [tokens, hidden] fp32 += mixer(x), x [tokens, hidden] bf16.
  virtual void forward(const bf16* x, float* residual, const DeviceStep& st) = 0;
  /// After a verify step with the same rows: row b keeps its first accepted[b] tokens (device
  /// [n]; 0 for pad rows, 0 on a real row discards its step). Stateless blocks and attention
  /// (whose length cursor is the model's position) need nothing.
  virtual void accept(const DeviceStep& /*st*/, const int32_t* /*accepted*/) {}
  /// Zeroes the per-sequence state of the rows' slots (device ids): conv and SSM state (the KV
  /// cache needs none: a slot only reads positions it wrote). Enqueued on rows.stream.
  virtual void reset(const Rows& rows) = 0;
  /// Bytes of DeviceStep::scratch forward() uses for up to `slots` rows.
  virtual size_t scratch_bytes() const = 0;
};

std::unique_ptr<CudaMixer> make_cuda_mamba2(const Checkpoint& ck, const ModelConfig& cfg,
                                            const std::string& prefix, CudaShared& sh);
std::unique_ptr<CudaMixer> make_cuda_gdn(const Checkpoint& ck, const ModelConfig& cfg,
                                         const std::string& prefix, CudaShared& sh);
std::unique_ptr<CudaMixer> make_cuda_attention(const Checkpoint& ck, const ModelConfig& cfg,
                                               const std::string& prefix, CudaShared& sh);
std::unique_ptr<CudaMixer> make_cuda_mlp(const Checkpoint& ck, const ModelConfig& cfg,
                                         const std::string& prefix, CudaShared& sh);
/// MoE block (moe_mixer.cpp): Nemotron-H (sigmoid router, relu2 experts, LatentMoE, shared
/// experts) and Qwen (softmax router, SwiGLU experts, gated shared expert).
std::unique_ptr<CudaMixer> make_cuda_moe(const Checkpoint& ck, const ModelConfig& cfg,
                                         const std::string& prefix, CudaShared& sh);

/// Carves typed buffers out of a scratch base at 256-byte boundaries. With a null base it only
/// counts, so one function can both size a mixer's scratch and lay it out.
class Carve {
 public:
  explicit Carve(char* base) : base_(base) {}
  template <class T>
  T* take(int64_t n) {
    off_ = (off_ + 255) / 256 * 256;
    T* p = base_ ? reinterpret_cast<T*>(base_ + off_) : nullptr;
    off_ += static_cast<size_t>(n) * sizeof(T);
    return p;
  }
  size_t bytes() const { return off_; }

 private:
  char* base_;
  size_t off_ = 0;
};

/// Base of a mixer whose `layout(Carve&)` lays out its step scratch: scratch_bytes() is that
/// layout counted on a null base, defined once here instead of in every mixer.
template <class Derived>
class CarvedMixer : public CudaMixer {
 public:
  size_t scratch_bytes() const final {
    Carve c(nullptr);
    static_cast<const Derived*>(this)->layout(c);
    return c.bytes();
  }
};

/// An SSM mixer's rolling conv state [slots, C, k] and, with verify steps, what their rollback
/// keeps (kernels.h conv_step / conv_rollback).
class ConvBuffers {
 public:
  ConvBuffers() = default;
  ConvBuffers(DeviceArena& a, const CudaShared& sh, int64_t C, int64_t k)
      : C_(C), k_(static_cast<int>(k)), slots_(static_cast<int32_t>(sh.slots)) {
    state_ = a.alloc_n<float>(sh.slots * C * k);
    if (sh.spec_T > 0) {
      saved_ = a.alloc_n<float>(sh.slots * C * k);
      kept_ = a.alloc_n<float>(sh.slots * sh.spec_T * C);
    }
  }
  /// Points a conv launch at the state and the step's rows (and, verify steps, the rollback's
  /// buffers); the caller sets the input and output columns.
  void bind(ConvStep& cv, const DeviceStep& st) const {
    cv.C = C_;
    cv.k = k_;
    cv.state = state_;
    cv.slots = st.slots;
    cv.num_slots = slots_;
    cv.T = static_cast<int>(st.T);
    cv.ntok = st.ntok;
    if (st.speculative) cv.saved = saved_, cv.kept = kept_;
  }
  /// After a verify step: the state after each row's accepted tokens.
  void rollback(const DeviceStep& st, const int32_t* accepted) const {
    ConvRollback rb;
    rb.state = state_;
    rb.saved = saved_;
    rb.kept = kept_;
    rb.slots = st.slots;
    rb.ntok = st.ntok;
    rb.accepted = accepted;
    rb.num_slots = slots_;
    rb.C = C_;
    rb.k = k_;
    rb.T = static_cast<int>(st.T);
    conv_rollback(rb, st.n, st.stream);
  }
  /// Zeroes the state of the rows' slots (device ids).
  void reset(const Rows& rows) const {
    zero_slot_rows(state_, C_ * k_ * 4, rows.slot_ids.ptr<int32_t>(), rows.slot_ids.numel(),
                   slots_, static_cast<cudaStream_t>(rows.stream));
  }

 private:
  float *state_ = nullptr, *saved_ = nullptr, *kept_ = nullptr;
  int64_t C_ = 0;
  int k_ = 4;
  int32_t slots_ = 0;
};

/// Zeroes every state buffer of the rows' slots in an SSM layer's pool (state rows of
/// `row_bytes` bytes; a slot's state_buffers() rows are contiguous, so they are one row here).
inline void zero_state_rows(void* state, int64_t row_bytes, const CudaShared& sh,
                            const Rows& rows) {
  zero_slot_rows(state, row_bytes * sh.state_buffers(), rows.slot_ids.ptr<int32_t>(),
                 rows.slot_ids.numel(), static_cast<int32_t>(sh.slots),
                 static_cast<cudaStream_t>(rows.stream));
}

}  // namespace replayssm::engine::cuda
