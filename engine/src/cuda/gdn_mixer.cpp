// Qwen3-Next / Qwen3.5 Gated DeltaNet mixer decode step on CUDA (models.md §2.4-2.5; CPU twin:
// model/gdn_mixer.cpp). One GEMM projects [q | k | v | z | b | a]: Qwen3.5's split projections
// stacked, or Qwen3-Next's interleaved in_proj_qkvz / in_proj_ba with their rows reordered once
// at load (model/weights.h deinterleave_*), so no per-step de-interleave is needed. Then causal
// conv + SiLU on [q | k | v] into contiguous q, k, v (b and a copied alongside), the GDN step
// through the library (L2 norm, scale, beta, gate inside the op; fp32 state), the per-head RMSNorm
// then * silu(z), out_proj accumulated into the residual.
#include "cuda/mixers.h"
#include "cuda/state_emulation.h"
#include "model/weights.h"
#include "cuda/gdn/gdn_cuda.h"
#include "replayssm/gdn.h"

namespace replayssm::engine::cuda {
namespace {

class GdnMixer final : public CarvedMixer<GdnMixer> {
  friend class CarvedMixer<GdnMixer>;  // layout()

 public:
  GdnMixer(const Checkpoint& ck, const ModelConfig& cfg, const std::string& p, CudaShared& sh)
      : c_(cfg.gdn), eps_(static_cast<float>(cfg.norm_eps)), sh_(sh) {
    DeviceArena& a = *sh.arena;
    const GdnWeights w = load_gdn_weights(ck, cfg, p);
    if (c_.interleaved_proj) {
      const cpu::Linear qkvz = deinterleave_qkvz(w.qkvz, c_), ba = deinterleave_ba(w.ba, c_);
      in_proj_ = a.upload_linear({&qkvz, &ba});
    } else {
      in_proj_ = a.upload_linear({&w.qkv, &w.z, &w.b, &w.a});
    }
    out_proj_ = a.upload_linear({&w.out_proj});
    conv_w_ = a.upload_f32(w.conv_w);
    norm_w_ = a.upload_f32(w.norm_w);
    const int64_t S = sh.slots, Hk = c_.num_k_heads, Hv = c_.num_v_heads;
    const int64_t dk = c_.head_k_dim, dv = c_.head_v_dim;
    layer_.dims = {Hk, Hv, dk, dv, gdn::Gate::kScalar};
    layer_.A_log = device_view(a.upload_f32(w.A_log), DType::kF32, {Hv});
    layer_.dt_bias = device_view(a.upload_f32(w.dt_bias), DType::kF32, {Hv});

    conv_ = ConvBuffers(a, sh, c_.conv_dim(), c_.conv_kernel);
    const int64_t R = sh.mode == SsmMode::kReplay ? sh.cursors.config.rows() : 1;
    const int64_t SB = S * sh.state_buffers();  // the snapshot baseline's buffers per slot
    cache_.state = device_view(alloc_state(a, sh.state_dtype, SB * Hv * dv * dk), sh.state_dtype,
                               {SB, Hv, dv, dk});
    cache_.ring_u = device_view(a.alloc_n<float>(S * Hv * R * dv), DType::kF32, {S, Hv, R, dv});
    cache_.ring_k = device_view(a.alloc_n<float>(S * Hk * R * dk), DType::kF32, {S, Hk, R, dk});
    cache_.ring_g = device_view(a.alloc_n<float>(S * Hv * R), DType::kF32, {S, Hv, R});
    // Split modes fp32/bf16, fp32/fp16, fp32/fp8 and fp32/nvfp4 run in the library (the read
    // copy, and each record's raw v and beta: the flush recomputes u from the checkpoint), and
    // fp16sr/fp16sr and fp16sr/nvfp4 (the float16 checkpoint and its SR keys; v and beta kept
    // alike); other modes are emulated, split ones over fp32/fp16.
    const int64_t ssm_layer = sh.ssm_layers;
    emu_ = StateEmulation(sh.state_mode, SsmFamilyKind::kGdn, a, S, Hv, dv, dk, sh.ssm_layers++);
    cache_.mode = emu_.library_mode();
    if (cache_.mode.is_split()) {
      cache_.ring_v = device_view(a.alloc_n<float>(S * Hv * R * dv), DType::kF32, {S, Hv, R, dv});
      cache_.ring_beta = device_view(a.alloc_n<float>(S * Hv * R), DType::kF32, {S, Hv, R});
    }
    if (cache_.mode.has_read_copy()) cache_.read = alloc_read_copy(a, cache_.mode.read, S, Hv, dv, dk);
    if (cache_.mode.uses_sr()) cache_.sr = alloc_sr_keys(a, S, ssm_layer);
  }

  void forward(const bf16* x, float* residual, const DeviceStep& st) override {
    const int64_t B = st.n, T = st.T, NT = st.tokens, Hk = c_.num_k_heads, Hv = c_.num_v_heads;
    const int64_t dk = c_.head_k_dim, dv = c_.head_v_dim, cd = c_.conv_dim();
    Carve carve(st.scratch);
    const Scratch s = layout(carve);
    st.blas->linear(in_proj_, x, NT, s.proj, false);  // [q | k | v | z | b | a]

    ConvStep cv;
    cv.in = s.proj;
    cv.ld_in = in_proj_.out;
    cv.in_off = 0;
    conv_.bind(cv, st);
    cv.w = conv_w_;
    cv.out[0] = s.q, cv.out[1] = s.k, cv.out[2] = s.v;
    cv.out_begin[0] = 0, cv.out_begin[1] = Hk * dk, cv.out_begin[2] = 2 * Hk * dk;
    cv.out_begin[3] = cd;
    cv.pass_off = cd + Hv * dv;
    cv.pass_n = 2 * Hv;
    cv.pass_split = Hv;
    cv.pass_out[0] = s.b, cv.pass_out[1] = s.a;
    conv_step(cv, B, st.stream);

    gdn::Tokens in;  // [B, T, ...]: the conv wrote row b's tokens at b * T + t
    in.q = device_view(s.q, DType::kF32, {B, T, Hk, dk});
    in.k = device_view(s.k, DType::kF32, {B, T, Hk, dk});
    in.v = device_view(s.v, DType::kF32, {B, T, Hv, dv});
    in.a = device_view(s.a, DType::kF32, {B, T, Hv});
    in.b = device_view(s.b, DType::kF32, {B, T, Hv});
    const TensorView y = device_view(s.y, DType::kF32, {B, T, Hv, dv});
    if (st.speculative) {
      if (sh_.mode == SsmMode::kReplay)
        gdn::verify(layer_, cache_, sh_.cursors, in, st.rows, y);
      else
        snapshot_verify(in, st, y);
    } else if (sh_.mode == SsmMode::kReplay)
      gdn::replay_step(layer_, cache_, sh_.cursors, in, st.rows, y);
    else
      gdn::conventional_step(layer_, cache_, in, st.rows, y);
    emu_.after_step(static_cast<float*>(cache_.state.data),
                    static_cast<uint16_t*>(cache_.read.values.data), st.slots, B,
                    sh_.cursors.is_flush.ptr<int8_t>(), st.stream);

    GatedNorm gn;  // norm per value head (weight [dv] shared), then * silu(z)
    gn.y = s.y;
    gn.ldy = Hv * dv;
    gn.z = s.proj + cd;
    gn.ldz = in_proj_.out;
    gn.w = norm_w_;
    gn.group = dv;
    gn.groups = Hv;
    gn.gate_before = false;
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
      zero_state_rows(cache_.state.data, c_.num_v_heads * c_.head_v_dim * c_.head_k_dim * 4, sh_,
                      rows);
    else
      gdn::reset_slots(cache_, rows);
    emu_.reset(rows.slot_ids.ptr<int32_t>(), rows.slot_ids.numel(),
               static_cast<cudaStream_t>(rows.stream));
  }

 private:
  struct Scratch {
    float *proj, *q, *k, *v, *a, *b, *y;
    bf16* gated;
  };
  /// The snapshot baseline's verify (conventional mode): T_b sequential conventional updates from
  /// the row's current buffer, one full state snapshot per token (CudaShared::snap_*).
  void snapshot_verify(const gdn::Tokens& in, const DeviceStep& st, const TensorView& y) {
    Rows r = st.rows;
    r.slot_ids = device_view(sh_.snap_src, DType::kI32, {st.n});
    replayssm::cuda::gdn::snapshot_verify(
        layer_, cache_.state, in, r, device_view(sh_.snap_dst, DType::kI32, {st.n, st.T}), y);
  }
  Scratch layout(Carve& c) const {
    const int64_t S = sh_.max_tokens, Hk = c_.num_k_heads, Hv = c_.num_v_heads;
    const int64_t dk = c_.head_k_dim, dv = c_.head_v_dim;
    Scratch s;
    s.proj = c.take<float>(S * in_proj_.out);
    s.q = c.take<float>(S * Hk * dk);
    s.k = c.take<float>(S * Hk * dk);
    s.v = c.take<float>(S * Hv * dv);
    s.a = c.take<float>(S * Hv);
    s.b = c.take<float>(S * Hv);
    s.y = c.take<float>(S * Hv * dv);
    s.gated = c.take<bf16>(S * Hv * dv);
    return s;
  }

  GdnConfig c_;
  float eps_;
  CudaShared& sh_;
  DeviceLinear in_proj_, out_proj_;
  float *conv_w_ = nullptr, *norm_w_ = nullptr;
  ConvBuffers conv_;
  gdn::Layer layer_;
  gdn::Cache cache_;
  StateEmulation emu_;
};

}  // namespace

std::unique_ptr<CudaMixer> make_cuda_gdn(const Checkpoint& ck, const ModelConfig& cfg,
                                         const std::string& prefix, CudaShared& sh) {
  return std::make_unique<GdnMixer>(ck, cfg, prefix, sh);
}

}  // namespace replayssm::engine::cuda
