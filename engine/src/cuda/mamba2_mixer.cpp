// Nemotron-H / Mamba2 mixer decode step on CUDA (models.md §2.2-2.3; CPU twin:
// model/mamba2_mixer.cpp): in_proj GEMM -> [z | xBC | dt] (fp32), causal conv + SiLU on xBC
// (rolling per-slot state) splitting x | B | C into contiguous buffers, the SSM step through the
// library on device tensors (fp32 state; replay or conventional), the gated RMSNorm of
// y * silu(z) per group, out_proj GEMM accumulated into the residual.
#include <algorithm>
#include <cmath>

#include "cuda/mixers.h"
#include "cuda/state_emulation.h"
#include "model/weights.h"
#include "cuda/mamba2/mamba2_cuda.h"
#include "replayssm/mamba2.h"

namespace replayssm::engine::cuda {
namespace {

class Mamba2Mixer final : public CarvedMixer<Mamba2Mixer> {
  friend class CarvedMixer<Mamba2Mixer>;  // layout()

 public:
  Mamba2Mixer(const Checkpoint& ck, const ModelConfig& cfg, const std::string& p, CudaShared& sh)
      : c_(cfg.mamba), eps_(static_cast<float>(cfg.norm_eps)), sh_(sh) {
    DeviceArena& a = *sh.arena;
    const Mamba2Weights w = load_mamba2_weights(ck, cfg, p);
    proj_out_ = w.in_proj.out;
    in_proj_ = a.upload_linear({&w.in_proj});
    out_proj_ = a.upload_linear({&w.out_proj});
    conv_w_ = a.upload_f32(w.conv_w);
    conv_b_ = w.conv_b.empty() ? nullptr : a.upload_f32(w.conv_b);
    norm_w_ = a.upload_f32(w.norm_w);
    const int64_t S = sh.slots, Hh = c_.nheads, P = c_.headdim, N = c_.d_state, G = c_.ngroups;
    layer_.dims = {Hh, P, N, G};
    layer_.A_log = device_view(a.upload_f32(w.A_log), DType::kF32, {Hh});
    dt_bias_ = a.upload_f32(w.dt_bias);
    // With a dt floor or clamp the conv launch computes the processed delta and the op gets it
    // with a zero bias and no softplus (as the CPU mixer does).
    layer_.dt_bias = device_view(clamped() ? a.alloc_n<float>(Hh) : dt_bias_, DType::kF32, {Hh});
    layer_.D = device_view(a.upload_f32(w.D), DType::kF32, {Hh});
    layer_.dt_softplus = !clamped();

    conv_ = ConvBuffers(a, sh, c_.conv_dim(), c_.conv_kernel);
    const int64_t R = sh.mode == SsmMode::kReplay ? sh.cursors.config.rows() : 1;
    const int64_t SB = S * sh.state_buffers();  // the snapshot baseline's buffers per slot
    cache_.state = device_view(alloc_state(a, sh.state_dtype, SB * Hh * P * N), sh.state_dtype,
                               {SB, Hh, P, N});
    cache_.ring_x = device_view(a.alloc_n<float>(S * Hh * R * P), DType::kF32, {S, Hh, R, P});
    cache_.ring_dt = device_view(a.alloc_n<float>(S * Hh * R), DType::kF32, {S, Hh, R});
    cache_.ring_B = device_view(a.alloc_n<float>(S * G * R * N), DType::kF32, {S, G, R, N});
    // Split modes fp32/bf16, fp32/fp16, fp32/fp8, fp32/nvfp4 (replay only): the read copy
    // (precision.h layout: values and scales) next to the fp32 checkpoint; the library's
    // reset_slots clears it with the checkpoint. fp16sr/fp16sr and fp16sr/nvfp4: the float16
    // checkpoint and its SR keys (and the NVFP4 copy). Other modes: emulated over fp32/fp32.
    const int64_t ssm_layer = sh.ssm_layers;
    emu_ = StateEmulation(sh.state_mode, SsmFamilyKind::kMamba2, a, S, Hh, P, N, sh.ssm_layers++);
    cache_.mode = emu_.library_mode();
    if (cache_.mode.has_read_copy())
      cache_.read = alloc_read_copy(a, cache_.mode.read, S, Hh, P, N);
    if (cache_.mode.uses_sr()) cache_.sr = alloc_sr_keys(a, S, ssm_layer);
  }

  void forward(const bf16* x, float* residual, const DeviceStep& st) override {
    const int64_t B = st.n, T = st.T, NT = st.tokens, di = c_.d_inner(), cd = c_.conv_dim();
    const int64_t Hh = c_.nheads, P = c_.headdim, G = c_.ngroups, N = c_.d_state, GN = G * N;
    Carve carve(st.scratch);
    const Scratch s = layout(carve);
    st.blas->linear(in_proj_, x, NT, s.proj, false);

    ConvStep cv;
    cv.in = s.proj;
    cv.ld_in = proj_out_;
    cv.in_off = di;  // [z | xBC | dt]
    conv_.bind(cv, st);
    cv.w = conv_w_;
    cv.bias = conv_b_;
    cv.out[0] = s.x, cv.out[1] = s.B, cv.out[2] = s.C;
    cv.out_begin[0] = 0, cv.out_begin[1] = di, cv.out_begin[2] = di + GN, cv.out_begin[3] = cd;
    cv.pass_off = di + cd;
    cv.pass_n = cv.pass_split = Hh;
    cv.pass_out[0] = s.dt;
    if (clamped()) {
      cv.dt_process = true;
      cv.dt_bias = dt_bias_;
      cv.dt_lo = static_cast<float>(std::max({sh_.dt_floor, c_.dt_min_clamp, 0.0}));
      cv.dt_hi = c_.dt_max_clamp > 0 && std::isfinite(c_.dt_max_clamp)
                     ? static_cast<float>(c_.dt_max_clamp)
                     : 0.0f;
    }
    conv_step(cv, B, st.stream);

    mamba2::Tokens in;  // [B, T, ...]: the conv wrote row b's tokens at b * T + t
    in.x = device_view(s.x, DType::kF32, {B, T, Hh, P});
    in.dt = device_view(s.dt, DType::kF32, {B, T, Hh});
    in.B = device_view(s.B, DType::kF32, {B, T, G, N});
    in.C = device_view(s.C, DType::kF32, {B, T, G, N});
    const TensorView y = device_view(s.y, DType::kF32, {B, T, Hh, P});
    float* const state = static_cast<float*>(cache_.state.data);  // fp32 whenever emulating
    const int8_t* const is_flush = sh_.cursors.is_flush.ptr<int8_t>();
    if (st.speculative) {
      if (sh_.mode == SsmMode::kReplay)
        mamba2::verify(layer_, cache_, sh_.cursors, in, st.rows, y);
      else
        snapshot_verify(in, st, y);
    } else if (sh_.mode == SsmMode::kReplay) {
      emu_.before_step(state, st.slots, B, is_flush, st.stream);
      mamba2::replay_step(layer_, cache_, sh_.cursors, in, st.rows, y);
    } else {
      mamba2::conventional_step(layer_, cache_, in, st.rows, y);
    }
    emu_.after_step(state, nullptr, st.slots, B, is_flush, st.stream);

    GatedNorm gn;
    gn.y = s.y;
    gn.ldy = di;
    gn.z = s.proj;  // z is the first d_inner columns of the projection
    gn.ldz = proj_out_;
    gn.w = norm_w_;
    gn.group = c_.norm_group_size;
    gn.groups = di / c_.norm_group_size;
    gn.gate_before = true;
    gn.eps = eps_;
    gn.out = s.gated;
    gated_rms_norm(gn, NT, st.stream);
    st.blas->linear(out_proj_, s.gated, NT, residual, true);
  }

  void accept(const DeviceStep& st, const int32_t* accepted) override {
    conv_.rollback(st, accepted);
  }

  void reset(const Rows& rows) override {
    conv_.reset(rows);
    if (sh_.snapshots())
      zero_state_rows(cache_.state.data, c_.nheads * c_.headdim * c_.d_state * 4, sh_,
                      rows);
    else
      mamba2::reset_slots(cache_, rows);
    emu_.reset(rows.slot_ids.ptr<int32_t>(), rows.slot_ids.numel(),
               static_cast<cudaStream_t>(rows.stream));
  }

 private:
  struct Scratch {
    float *proj, *x, *B, *C, *dt, *y;
    bf16* gated;
  };
  Scratch layout(Carve& c) const {
    const int64_t S = sh_.max_tokens, di = c_.d_inner(), GN = c_.ngroups * c_.d_state;
    Scratch s;
    s.proj = c.take<float>(S * proj_out_);
    s.x = c.take<float>(S * di);
    s.B = c.take<float>(S * GN);
    s.C = c.take<float>(S * GN);
    s.dt = c.take<float>(S * c_.nheads);
    s.y = c.take<float>(S * di);
    s.gated = c.take<bf16>(S * di);
    return s;
  }
  /// The snapshot baseline's verify (conventional mode): T_b sequential conventional updates from
  /// the row's current buffer, one full state snapshot per token (CudaShared::snap_*).
  void snapshot_verify(const mamba2::Tokens& in, const DeviceStep& st, const TensorView& y) {
    Rows r = st.rows;
    r.slot_ids = device_view(sh_.snap_src, DType::kI32, {st.n});
    replayssm::cuda::mamba2::snapshot_verify(
        layer_, cache_.state, in, r, device_view(sh_.snap_dst, DType::kI32, {st.n, st.T}), y);
  }
  bool clamped() const {
    return sh_.dt_floor > 0 || c_.dt_min_clamp > 0 ||
           (c_.dt_max_clamp > 0 && std::isfinite(c_.dt_max_clamp));
  }

  Mamba2Config c_;
  float eps_;
  CudaShared& sh_;
  StateEmulation emu_;
  int64_t proj_out_ = 0;
  DeviceLinear in_proj_, out_proj_;
  float *conv_w_ = nullptr, *conv_b_ = nullptr, *norm_w_ = nullptr, *dt_bias_ = nullptr;
  ConvBuffers conv_;
  mamba2::Layer layer_;
  mamba2::Cache cache_;
};

}  // namespace

std::unique_ptr<CudaMixer> make_cuda_mamba2(const Checkpoint& ck, const ModelConfig& cfg,
                                            const std::string& prefix, CudaShared& sh) {
  return std::make_unique<Mamba2Mixer>(ck, cfg, prefix, sh);
}

}  // namespace replayssm::engine::cuda
