// Public entry points of include/replayssm/mamba2.h: validate every argument (typed errors naming
// the argument, the actual and the expected value) before anything is touched, then dispatch on
// the device: CPU -> src/cpu/mamba2_*.cpp; CUDA -> src/cuda/mamba2 (conventional, replay step,
// verify, reset).
#include "replayssm/mamba2.h"

#include <string>

#include "common/state_check.h"
#include "common/validate.h"
#include "cpu/mamba2_cpu.h"
#include "replayssm/errors.h"
#ifdef RSSM_WITH_CUDA
#include "cuda/mamba2/mamba2_cuda.h"
#endif

namespace replayssm::mamba2 {
namespace {

using validate::kAny;
constexpr DType kF32 = DType::kF32;

/// Everything a backend needs after validation: rank-4 token views and the host rows.
struct Call {
  Device device = Device::kCPU;
  Tokens in;
  TensorView y;
  cpu::mamba2::HostRows rows;
};

std::string arg(const char* op, const char* name) { return std::string(op) + " " + name; }

void check_dims(const Dims& d, const char* op) {
  check<ConfigError>(d.nheads > 0 && d.headdim > 0 && d.d_state > 0 && d.ngroups > 0, op,
                     ": dims nheads = ", d.nheads, ", headdim = ", d.headdim, ", d_state = ",
                     d.d_state, ", ngroups = ", d.ngroups, ", expected all > 0");
  check<ConfigError>(d.nheads % d.ngroups == 0, op, ": ngroups = ", d.ngroups,
                     " does not divide nheads = ", d.nheads);
}

void check_layer(const Layer& layer, Device dev, const char* op) {
  const int64_t H = layer.dims.nheads;
  validate::expect(layer.A_log, arg(op, "A_log").c_str(), {H}, {kF32}, dev);
  validate::expect(layer.dt_bias, arg(op, "dt_bias").c_str(), {H}, {kF32}, dev);
  validate::expect_optional(layer.D, arg(op, "D").c_str(), {H}, {kF32}, dev);
}

/// Validates the token tensors and y; T_max bounds the token axis (1 for decode steps).
void check_tokens(const Layer& layer, const Tokens& in, const TensorView& y, int64_t T_max,
                  Device dev, const char* op, Call& call) {
  const Dims& d = layer.dims;
  const TensorView x = validate::with_token_axis(in.x, 4);
  validate::expect(x, arg(op, "x").c_str(), {kAny, kAny, d.nheads, d.headdim},
                   {kF32, DType::kBF16}, dev);
  const int64_t batch = x.shape[0], T = x.shape[1];
  check<ShapeError>(T >= 1 && T <= T_max, arg(op, "x"), ": token axis is ", T, ", expected 1..",
                    T_max, " (", x.describe(), ")");
  const DType dt = x.dtype;
  call.in.x = x;
  call.in.dt = validate::with_token_axis(in.dt, 3);
  if (dt == kF32)
    validate::expect(call.in.dt, arg(op, "dt").c_str(), {batch, T, d.nheads}, {kF32}, dev);
  else
    validate::expect(call.in.dt, arg(op, "dt").c_str(), {batch, T, d.nheads}, {kF32, dt}, dev);
  call.in.B = validate::with_token_axis(in.B, 4);
  validate::expect(call.in.B, arg(op, "B").c_str(), {batch, T, d.ngroups, d.d_state}, {dt}, dev);
  call.in.C = validate::with_token_axis(in.C, 4);
  validate::expect(call.in.C, arg(op, "C").c_str(), {batch, T, d.ngroups, d.d_state}, {dt}, dev);
  call.in.z = validate::with_token_axis(in.z, 4);
  validate::expect_optional(call.in.z, arg(op, "z").c_str(), {batch, T, d.nheads, d.headdim},
                            {dt}, dev);
  call.y = validate::with_token_axis(y, 4);
  validate::expect(call.y, arg(op, "y").c_str(), {batch, T, d.nheads, d.headdim}, {dt}, dev);
}

int64_t check_state(const Layer& layer, const Cache& cache, Device dev, const char* op) {
  const Dims& d = layer.dims;
  if (!cache.mode.is_default())  // precision.h: the mode's state, scales, read copy, SR keys
    return validate::state_buffers(cache.mode, cache.state, cache.state_scales, cache.read,
                                   cache.sr, d.nheads, d.headdim, d.d_state, dev, op);
  if (dev == Device::kCUDA)  // the CUDA kernels also keep 16-bit checkpoints (fp32 arithmetic)
    validate::expect(cache.state, arg(op, "state").c_str(),
                     {kAny, d.nheads, d.headdim, d.d_state}, {kF32, DType::kF16, DType::kBF16},
                     dev);
  else
    validate::expect(cache.state, arg(op, "state").c_str(),
                     {kAny, d.nheads, d.headdim, d.d_state}, {kF32}, dev);
  return cache.state.shape[0];
}

void check_ring(const Layer& layer, const Cache& cache, int64_t slots, int64_t R, Device dev,
                const char* op) {
  const Dims& d = layer.dims;
  // CUDA rings may hold bfloat16 x and B (lossless copies of bfloat16 inputs; checked there).
  const DType ring16 = dev == Device::kCUDA ? DType::kBF16 : kF32;
  validate::expect(cache.ring_x, arg(op, "ring_x").c_str(), {slots, d.nheads, R, d.headdim},
                   {kF32, ring16}, dev);
  validate::expect(cache.ring_dt, arg(op, "ring_dt").c_str(), {slots, d.nheads, R}, {kF32}, dev);
  validate::expect(cache.ring_B, arg(op, "ring_B").c_str(), {slots, d.ngroups, R, d.d_state},
                   {kF32, ring16}, dev);
}

/// Host rows; on CUDA only the metadata is checked (the values live on the device). T = 0: the op
/// feeds no tokens and ignores num_tokens.
void check_rows(const Rows& rows, int64_t batch, int64_t slots, int64_t T, Device dev,
                const char* op, Call& call) {
  call.rows.pad = rows.pad_slot_id;
  if (dev != Device::kCPU) {
    validate::expect(rows.slot_ids, arg(op, "slot_ids").c_str(), {batch}, {DType::kI32}, dev);
    if (T > 0)
      validate::expect_optional(rows.num_tokens, arg(op, "num_tokens").c_str(), {batch},
                                {DType::kI32}, dev);
    return;
  }
  call.rows.slot = validate::slot_ids(rows, batch, slots, op);
  if (T > 0) call.rows.num_tokens = validate::num_tokens(rows, call.rows.slot, T, op);
}

/// Every real row's cursor must address the ring: origin in [0, R) and h + T_b <= L, so the
/// records written at logical h..h+T_b-1 and the history read at 0..h-1 stay inside the ring.
void check_cursor_values(const RingCursors& cur, const Call& call, const char* op) {
  const int64_t L = cur.config.L, R = cur.config.rows();
  for (int64_t b = 0; b < call.rows.batch(); ++b) {
    if (call.rows.is_pad(b)) continue;
    const int32_t s = call.rows.slot[b];
    const int32_t origin = cur.origin.ptr<int32_t>()[s], h = cur.h.ptr<int32_t>()[s];
    const int32_t Tb = call.rows.num_tokens[b];
    check<SlotError>(origin >= 0 && origin < R, op, ": cursors.origin[", s, "] = ", origin,
                     " (row ", b, "), expected 0..", R - 1);
    check<SlotError>(h >= 0 && h <= L - Tb, op, ": cursors.h[", s, "] = ", h, " (row ", b,
                     ", ", Tb, " token(s)), expected 0..", L - Tb, " (h + T_b <= L = ", L, ")");
  }
}

[[noreturn]] void no_cuda(const char* op) {
  throw UnsupportedError(std::string(op) +
                         ": the CUDA backend for this op is not built yet (use CPU tensors)");
}

Device device_of(const Layer& layer, const Cache& cache, const Tokens& in, const Rows& rows,
                 const TensorView& y, const RingCursors* cur, const char* op) {
  if (cur)
    return validate::common_device(
        {&layer.A_log, &layer.dt_bias, &layer.D, &cache.state, &cache.ring_x, &cache.ring_dt,
         &cache.ring_B, &in.x, &in.dt, &in.B, &in.C, &in.z, &y, &rows.slot_ids, &rows.num_tokens,
         &cur->origin, &cur->h, &cur->is_flush},
        op);
  return validate::common_device({&layer.A_log, &layer.dt_bias, &layer.D, &cache.state, &in.x,
                                  &in.dt, &in.B, &in.C, &in.z, &y, &rows.slot_ids,
                                  &rows.num_tokens},
                                 op);
}

/// The shared validation of the three token ops; returns the normalised call.
Call check_call(const Layer& layer, const Cache& cache, const RingCursors* cur, RingMode mode,
                const Tokens& in, const Rows& rows, const TensorView& y, const char* op) {
  Call call;
  check_dims(layer.dims, op);
  call.device = device_of(layer, cache, in, rows, y, cur, op);
  validate::state_mode_runs(cache.mode,
                            !cur                              ? validate::StateOp::kConventional
                            : mode == RingMode::kSpeculative ? validate::StateOp::kVerify
                                                              : validate::StateOp::kReplay,
                            call.device, op, /*cuda_split16=*/true,
                            /*cuda_quant=*/true);
  if (cur) {
    cur->config.validate();
    check<ConfigError>(cur->config.mode == mode, op, ": ring mode is ",
                       ring_mode_name(cur->config.mode), ", expected ", ring_mode_name(mode));
  }
  check_layer(layer, call.device, op);
  const int64_t T_max = mode == RingMode::kSpeculative ? cur->config.T : 1;
  check_tokens(layer, in, y, T_max, call.device, op, call);
  const int64_t slots = check_state(layer, cache, call.device, op);
  if (cur) {
    check_ring(layer, cache, slots, cur->config.rows(), call.device, op);
    validate::cursors(*cur, slots, mode, call.device, op);
  }
  check_rows(rows, call.in.x.shape[0], slots, call.in.x.shape[1], call.device, op, call);
  if (cur && call.device == Device::kCPU) check_cursor_values(*cur, call, op);
  return call;
}

}  // namespace

void conventional_step(const Layer& layer, Cache& cache, const Tokens& in, const Rows& rows,
                       TensorView y) {
  const char* op = "mamba2.conventional_step";
  const Call call = check_call(layer, cache, nullptr, RingMode::kDecode, in, rows, y, op);
#ifdef RSSM_WITH_CUDA
  if (call.device == Device::kCUDA)
    return cuda::mamba2::conventional_step(layer, cache, in, rows, y);
#endif
  if (call.device != Device::kCPU) no_cuda(op);
  cpu::mamba2::conventional_step(layer, cache, call.in, call.rows, call.y);
}

void replay_step(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
                 const Rows& rows, TensorView y) {
  const char* op = "mamba2.replay_step";
  const Call call = check_call(layer, cache, &cursors, RingMode::kDecode, in, rows, y, op);
#ifdef RSSM_WITH_CUDA
  if (call.device == Device::kCUDA)
    return cuda::mamba2::replay_step(layer, cache, cursors, in, rows, y);
#endif
  if (call.device != Device::kCPU) no_cuda(op);
  cpu::mamba2::replay_step(layer, cache, cursors, call.in, call.rows, call.y);
}

void verify(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
            const Rows& rows, TensorView y) {
  const char* op = "mamba2.verify";
  const Call call = check_call(layer, cache, &cursors, RingMode::kSpeculative, in, rows, y, op);
#ifdef RSSM_WITH_CUDA
  if (call.device == Device::kCUDA)
    return cuda::mamba2::verify(layer, cache, cursors, call.in, rows, call.y);
#endif
  if (call.device != Device::kCPU) no_cuda(op);
  cpu::mamba2::verify(layer, cache, cursors, call.in, call.rows, call.y);
}

void reset_slots(Cache& cache, const Rows& rows) {
  const char* op = "mamba2.reset_slots";
  const Device dev = validate::common_device({&cache.state, &rows.slot_ids}, op);
  validate::state_mode_runs(cache.mode, validate::StateOp::kReset, dev, op, /*cuda_split16=*/true,
                            /*cuda_quant=*/true);
  if (!cache.mode.is_default()) {
    // The state's head sizes are taken from the state itself (reset has no layer); n from the
    // values (nvfp4: two elements per byte).
    const TensorView& st = cache.state;
    check<ShapeError>(!st.empty() && st.ndim == 4, op, " state: ", st.empty() ? "missing" : st.describe(),
                      ", expected rank 4 [slots, H, P, N]");
    const int64_t n = st.shape[3] * (cache.mode.state_format() == StateFormat::kNvfp4 ? 2 : 1);
    validate::state_buffers(cache.mode, st, cache.state_scales, cache.read, cache.sr, st.shape[1],
                            st.shape[2], n, dev, op);
  } else if (dev == Device::kCUDA)
    validate::expect(cache.state, arg(op, "state").c_str(), {kAny, kAny, kAny, kAny},
                     {kF32, DType::kF16, DType::kBF16}, dev);
  else
    validate::expect(cache.state, arg(op, "state").c_str(), {kAny, kAny, kAny, kAny}, {kF32}, dev);
  const int64_t slots = cache.state.shape[0];
  const int64_t batch = rows.slot_ids.ndim == 1 ? rows.slot_ids.shape[0] : kAny;
  Call call;
  check_rows(rows, batch, slots, 0, dev, op, call);
#ifdef RSSM_WITH_CUDA
  if (dev == Device::kCUDA) return cuda::mamba2::reset_slots(cache, rows);
#endif
  if (dev != Device::kCPU) no_cuda(op);
  cpu::mamba2::reset_slots(cache, call.rows);
}

}  // namespace replayssm::mamba2
