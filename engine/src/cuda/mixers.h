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

/// The rows of one step, all device-resident.
struct DeviceStep {
  int64_t n = 0;                       ///< rows
  Rows rows;                           ///< slot ids int32 [n] on the device, the stream, no host checks
  const int32_t* slots = nullptr;      ///< = rows.slot_ids data
  const int32_t* positions = nullptr;  ///< [max_slots] position of each slot's current token
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
  DeviceArena* arena = nullptr;
};

/// Device memory for n SSM state elements of `dtype` (float32, or 16-bit bf16 / fp16).
inline void* alloc_state(DeviceArena& a, DType dtype, int64_t n) {
  if (dtype == DType::kF32) return a.alloc_n<float>(n);
  return a.alloc_n<uint16_t>(n);
}

class CudaMixer {
 public:
  virtual ~CudaMixer() = default;
  /// residual [n, hidden] fp32 += mixer(x), x [n, hidden] bf16.
  virtual void forward(const bf16* x, float* residual, const DeviceStep& st) = 0;
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

/// Zeroes the rolling conv state (`per_slot` floats per slot) of the rows' slots (device ids).
inline void zero_conv_state(float* conv_state, int64_t per_slot, const Rows& rows, int64_t slots) {
  zero_slot_rows(conv_state, per_slot * 4, rows.slot_ids.ptr<int32_t>(), rows.slot_ids.numel(),
                 static_cast<int32_t>(slots), static_cast<cudaStream_t>(rows.stream));
}

}  // namespace replayssm::engine::cuda
