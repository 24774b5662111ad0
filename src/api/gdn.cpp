// Public GDN/KDA entry points: validate every argument (nothing is touched before all checks
// pass), then dispatch on the device: CPU -> src/cpu/gdn_*; CUDA -> src/cuda/gdn (conventional
// step, replay step, verify, reset), which checks the device-resident rows itself.
#include "replayssm/gdn.h"

#include <string>
#include <vector>

#include "common/state_check.h"
#include "common/validate.h"
#include "cpu/gdn_cpu.h"
#include "replayssm/errors.h"
#ifdef RSSM_WITH_CUDA
#include "cuda/gdn/gdn_cuda.h"
#endif

namespace replayssm::gdn {
namespace {

using validate::expect;
using validate::kAny;
constexpr DType kF32 = DType::kF32;

enum class Op { kConventional, kReplay, kVerify };

const char* op_name(Op op) {
  switch (op) {
    case Op::kConventional:
      return "gdn.conventional_step";
    case Op::kReplay:
      return "gdn.replay_step";
    case Op::kVerify:
      return "gdn.verify";
  }
  return "gdn";
}

/// "<op> <arg>", the argument name used in messages.
struct Name {
  std::string s;
  Name(const char* op, const char* arg) : s(std::string(op) + " " + arg) {}
  operator const char*() const { return s.c_str(); }
};

void check_dims(const Dims& d, const char* op) {
  check<ConfigError>(d.num_k_heads >= 1, op, ": num_k_heads H = ", d.num_k_heads,
                     ", expected >= 1");
  check<ConfigError>(d.num_v_heads >= 1, op, ": num_v_heads HV = ", d.num_v_heads,
                     ", expected >= 1");
  check<ConfigError>(d.head_k_dim >= 1, op, ": head_k_dim K = ", d.head_k_dim, ", expected >= 1");
  check<ConfigError>(d.head_v_dim >= 1, op, ": head_v_dim V = ", d.head_v_dim, ", expected >= 1");
  check<ConfigError>(d.num_v_heads % d.num_k_heads == 0, op, ": num_v_heads HV = ", d.num_v_heads,
                     " is not a multiple of num_k_heads H = ", d.num_k_heads);
}

/// Whether the CUDA backend of op is built.
bool cuda_built(Op op) {
  (void)op;
#ifdef RSSM_WITH_CUDA
  return true;
#else
  return false;
#endif
}

/// Validates everything of one call and returns it in the CPU backend's form (T axis present).
/// For CUDA tensors (*on_cuda set) only the host-side checks run here; the CUDA backend checks the
/// device-resident rows and cursors.
cpu::Call prepare(Op op, const Layer& layer, Cache& cache, const RingCursors* cursors,
                  const Tokens& in, const Rows& rows, const TensorView& y_in,
                  bool* on_cuda = nullptr) {
  const char* name = op_name(op);
  const Dims& d = layer.dims;
  check_dims(d, name);
  const bool kda = d.gate == Gate::kChannel;
  const int64_t H = d.num_k_heads, HV = d.num_v_heads, K = d.head_k_dim, V = d.head_v_dim;
  const bool ring = op != Op::kConventional;

  std::vector<const TensorView*> views = {&layer.A_log, &layer.dt_bias, &in.q, &in.k,       &in.v,
                                          &in.a,        &in.b,          &y_in, &cache.state};
  if (ring) {
    views.insert(views.end(), {&cache.ring_u, &cache.ring_k, &cache.ring_g, &cursors->origin,
                               &cursors->h, &cursors->is_flush});
  }
  Device dev = Device::kCPU;
  bool first = true;
  for (const TensorView* t : views) {  // validate::common_device over a runtime list
    if (t->empty()) continue;
    if (first) dev = t->device;
    check<Error>(t->device == dev, name, ": tensors on different devices (", device_name(dev),
                 " and ", device_name(t->device), ")");
    first = false;
  }
  validate::state_mode_runs(cache.mode,
                            op == Op::kConventional ? validate::StateOp::kConventional
                            : op == Op::kVerify     ? validate::StateOp::kVerify
                                                    : validate::StateOp::kReplay,
                            dev, name, /*cuda_split16=*/true, /*cuda_quant=*/true);

  expect(layer.A_log, Name(name, "A_log"), {HV}, {kF32}, dev);
  if (kda)
    expect(layer.dt_bias, Name(name, "dt_bias (KDA)"), {HV, K}, {kF32}, dev);
  else
    expect(layer.dt_bias, Name(name, "dt_bias (GDN)"), {HV}, {kF32}, dev);

  cpu::Call c;
  c.layer = &layer;
  c.cache = &cache;
  c.cursors = cursors;
  // Either every token tensor (and y) carries the T axis or none does (then T = 1); q decides.
  const bool t_axis = in.q.ndim != 3;
  auto token_view = [&](const TensorView& t, int rank) {
    return t_axis ? t : validate::with_token_axis(t, rank);
  };
  c.in.q = token_view(in.q, 4);
  c.in.k = token_view(in.k, 4);
  c.in.v = token_view(in.v, 4);
  c.in.a = token_view(in.a, kda ? 4 : 3);
  c.in.b = token_view(in.b, 3);
  const int64_t T_axis = op == Op::kVerify ? kAny : 1;
  expect(c.in.q, Name(name, "q"), {kAny, T_axis, H, K}, {kF32, DType::kBF16}, dev);
  const int64_t batch = c.in.q.shape[0], T = c.in.q.shape[1];
  check<ShapeError>(T >= 1, name, " q: token axis is 0, expected at least one token per row");
  const DType dt = c.in.q.dtype;
  expect(c.in.k, Name(name, "k"), {batch, T, H, K}, {dt}, dev);
  expect(c.in.v, Name(name, "v"), {batch, T, HV, V}, {dt}, dev);
  if (kda)
    expect(c.in.a, Name(name, "a (KDA)"), {batch, T, HV, K}, {dt}, dev);
  else
    expect(c.in.a, Name(name, "a (GDN)"), {batch, T, HV}, {dt}, dev);
  expect(c.in.b, Name(name, "b"), {batch, T, HV}, {dt}, dev);
  c.y = op == Op::kVerify ? token_view(y_in, 4) : validate::with_token_axis(y_in, 4);
  expect(c.y, Name(name, "y"), {batch, T, HV, V}, {dt}, dev);

  if (!cache.mode.is_default())  // precision.h: the mode's state, scales, read copy, SR keys
    validate::state_buffers(cache.mode, cache.state, cache.state_scales, cache.read, cache.sr, HV,
                            V, K, dev, name);
  else if (dev == Device::kCUDA)  // the CUDA kernels also keep 16-bit checkpoints (fp32 arithmetic)
    expect(cache.state, Name(name, "state"), {kAny, HV, V, K}, {kF32, DType::kF16, DType::kBF16},
           dev);
  else
    expect(cache.state, Name(name, "state"), {kAny, HV, V, K}, {kF32}, dev);
  const int64_t slots = cache.state.shape[0];
  if (ring) {
    const RingMode mode = op == Op::kVerify ? RingMode::kSpeculative : RingMode::kDecode;
    validate::cursors(*cursors, slots, mode, dev, name);
    const int64_t R = cursors->config.rows();
    check<ConfigError>(T <= cursors->config.T, name, ": ", T,
                       " tokens per row, expected at most ring T = ", cursors->config.T);
    expect(cache.ring_u, Name(name, "ring_u"), {slots, HV, R, V}, {kF32}, dev);
    expect(cache.ring_k, Name(name, "ring_k"), {slots, H, R, K}, {kF32}, dev);
    if (kda)
      expect(cache.ring_g, Name(name, "ring_g (KDA)"), {slots, HV, R, K}, {kF32}, dev);
    else
      expect(cache.ring_g, Name(name, "ring_g (GDN)"), {slots, HV, R}, {kF32}, dev);
    if (cache.mode.is_split()) {  // the flush recomputes u from the raw v and beta
      expect(cache.ring_v, Name(name, "ring_v (split mode)"), {slots, HV, R, V}, {kF32}, dev);
      expect(cache.ring_beta, Name(name, "ring_beta (split mode)"), {slots, HV, R}, {kF32}, dev);
    }
  }

  check<UnsupportedError>(dev == Device::kCPU || cuda_built(op), name,
                          ": the CUDA backend for this op is not built yet (tensors are on cuda)");
  if (on_cuda) *on_cuda = dev == Device::kCUDA;
  if (dev == Device::kCUDA) return c;

  c.slots = validate::slot_ids(rows, batch, slots, name);
  c.num_tokens = validate::num_tokens(rows, c.slots, op == Op::kVerify ? T : 1, name);
  c.pad_slot_id = rows.pad_slot_id;
  if (ring) {
    const int64_t R = cursors->config.rows();
    for (int64_t b = 0; b < batch; ++b) {
      const int32_t s = c.slots[b];
      if (s == rows.pad_slot_id) continue;
      const int32_t origin = cursors->origin.ptr<int32_t>()[s], h = cursors->h.ptr<int32_t>()[s];
      check<SlotError>(origin >= 0 && origin < R, name, ": cursors.origin[", s, "] = ", origin,
                       " (row ", b, "), expected 0 <= origin < ", R);
      check<SlotError>(h >= 0 && h <= R - c.num_tokens[b], name, ": cursors.h[", s, "] = ", h,
                       " (row ", b, ") leaves no room for ", c.num_tokens[b],
                       " records, expected 0 <= h <= ", R - c.num_tokens[b]);
    }
  }
  return c;
}

}  // namespace

void conventional_step(const Layer& layer, Cache& cache, const Tokens& in, const Rows& rows,
                       TensorView y) {
  bool on_cuda = false;
  const cpu::Call c = prepare(Op::kConventional, layer, cache, nullptr, in, rows, y, &on_cuda);
#ifdef RSSM_WITH_CUDA
  if (on_cuda) return cuda::gdn::conventional_step(layer, cache, in, rows, y);
#endif
  cpu::conventional_step(c);
}

void replay_step(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
                 const Rows& rows, TensorView y) {
  bool on_cuda = false;
  const cpu::Call c = prepare(Op::kReplay, layer, cache, &cursors, in, rows, y, &on_cuda);
#ifdef RSSM_WITH_CUDA
  if (on_cuda) return cuda::gdn::replay_step(layer, cache, cursors, in, rows, y);
#endif
  cpu::replay_step(c);
}

void verify(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
            const Rows& rows, TensorView y) {
  bool on_cuda = false;
  const cpu::Call c = prepare(Op::kVerify, layer, cache, &cursors, in, rows, y, &on_cuda);
#ifdef RSSM_WITH_CUDA
  if (on_cuda) return cuda::gdn::verify(layer, cache, cursors, c.in, rows, c.y);
#endif
  cpu::verify(c);
}

void reset_slots(Cache& cache, const Rows& rows) {
  const char* name = "gdn.reset_slots";
  const Device dev = cache.state.device;
  validate::state_mode_runs(cache.mode, validate::StateOp::kReset, dev, name,
                            /*cuda_split16=*/true, /*cuda_quant=*/true);
  if (!cache.mode.is_default()) {
    const TensorView& st = cache.state;
    check<ShapeError>(!st.empty() && st.ndim == 4, name, " state: ",
                      st.empty() ? "missing" : st.describe(), ", expected rank 4 [slots, HV, V, K]");
    const int64_t K = st.shape[3] * (cache.mode.state_format() == StateFormat::kNvfp4 ? 2 : 1);
    validate::state_buffers(cache.mode, st, cache.state_scales, cache.read, cache.sr, st.shape[1],
                            st.shape[2], K, dev, name);
#ifdef RSSM_WITH_CUDA
    if (dev == Device::kCUDA) return cuda::gdn::reset_slots(cache, rows);  // state + read copy
#endif
    const std::vector<int32_t> ids = validate::slot_ids(rows, rows.slot_ids.shape[0], st.shape[0], name);
    return cpu::reset_slots(cache, ids, rows.pad_slot_id);
  }
  if (dev == Device::kCUDA) {
#ifdef RSSM_WITH_CUDA
    return cuda::gdn::reset_slots(cache, rows);  // checks the state (16-bit too) and the rows
#else
    throw UnsupportedError(std::string(name) +
                           ": the CUDA backend for this op is not built yet (tensors are on cuda)");
#endif
  }
  expect(cache.state, Name(name, "state"), {kAny, kAny, kAny, kAny}, {kF32}, dev);
  const std::vector<int32_t> ids =
      validate::slot_ids(rows, rows.slot_ids.shape[0], cache.state.shape[0], name);
  cpu::reset_slots(cache.state, ids, rows.pad_slot_id);
}

}  // namespace replayssm::gdn
