// Device containers of the GDN/KDA GPU tests (test_gdn_cuda*.cpp): layer parameters, slot pool
// (state/checkpoint, ring, cursors) and step inputs in guarded device buffers (cuda_test_util.h),
// with the fp64 copies the oracle needs, plus the shapes and case description shared by the GPU
// test files. Only compiled with the CUDA backend.
#pragma once
#ifdef RSSM_WITH_CUDA
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/gdn/gdn_cuda.h"
#include "cuda_test_util.h"
#include "replayssm/gdn.h"
#include "replayssm/ring.h"
#include "replayssm_ref.h"
#include "test_gdn_harness.h"

namespace replayssm::testing::gdn_cuda {

namespace cg = ::replayssm::cuda::gdn;
using cuda_test::DeviceBuffer;
using gdn::Gate;
using gdnt::Shape;
using ref::Vec;
constexpr DType kF32 = DType::kF32, kF16 = DType::kF16, kBF16 = DType::kBF16;

// The CUDA kernels are compiled for K = 64 and 128 (gdnt's CPU shapes kSmall / kTiny are not).
inline constexpr Shape kGpuSmall{"gpu-small", 2, 4, 64, 16};
using gdnt::kKimi;
using gdnt::kOdd;  // H 3, HV 6, K 64, V 96
using gdnt::kQwen122B;
using gdnt::kQwen4B;

/// A GPU test configuration: the CPU harness' Cfg (shape, gate, input dtype, beta_bf16, ring,
/// slots, pad, scale) plus the state/checkpoint dtype and a forced plan.
struct GpuCfg : gdnt::Cfg {
  DType state = kF32;
  cg::Plan plan;
  std::string describe() const {
    std::ostringstream os;
    os << gdnt::Cfg::describe() << " state " << dtype_name(state) << " route "
       << cg::route_name(plan.route) << " rows/block " << plan.rows_per_block << " rows/thread "
       << plan.rows_per_thread << " prefetch " << plan.prefetch_ring << " kernel " << plan.kernel
       << " heads/block " << plan.heads_per_block << " units/head " << plan.units_per_head
       << " stages " << plan.stages;
    return os.str();
  }
};

inline GpuCfg make_setup(const Shape& shape, Gate gate, DType in, DType state, int L,
                         int64_t slots) {
  GpuCfg s;
  s.shape = shape, s.gate = gate, s.dtype = in, s.state = state;
  s.ring = RingConfig{L, 1, RingMode::kDecode};
  s.slots = slots;
  return s;
}

/// A layer's parameters on the device and their exact fp64 copies (the CPU harness' ranges:
/// exp(A_log) in (0.22, 1.65), dt_bias in (-1, 1)).
struct DevLayer {
  DeviceBuffer A_log, dt_bias;
  ref::GdnParams ref;
  gdn::Layer layer;
  DevLayer(const GpuCfg& s, Rng& rng)
      : A_log(kF32, {s.shape.HV}, 151),
        dt_bias(kF32,
                s.kda() ? std::vector<int64_t>{s.shape.HV, s.shape.K}
                        : std::vector<int64_t>{s.shape.HV},
                152) {
    ref.H = s.shape.H, ref.HV = s.shape.HV, ref.K = s.shape.K, ref.V = s.shape.V;
    ref.kda = s.kda();
    for (int64_t i = 0; i < s.shape.HV; ++i)
      ref.A_log.push_back(static_cast<float>(rng.uniform(-1.5, 0.5)));
    for (int64_t i = 0; i < dt_bias.numel(); ++i)
      ref.dt_bias.push_back(static_cast<float>(rng.uniform(-1.0, 1.0)));
    ref.scale = s.scale;
    ref.beta_bf16 = s.beta_bf16;
    A_log.set_values(ref.A_log);
    dt_bias.set_values(ref.dt_bias);
    layer.dims = {s.shape.H, s.shape.HV, s.shape.K, s.shape.V, s.gate};
    layer.A_log = A_log.view();
    layer.dt_bias = dt_bias.view();
    layer.scale = s.scale;
    layer.beta_bf16 = s.beta_bf16;
  }
  bool guards_intact() const { return A_log.guards_intact() && dt_bias.guards_intact(); }
};

/// A layer's slot pool on the device: state/checkpoint, ring and cursors, all guarded. Filled
/// with finite random garbage and out-of-range cursors: a slot in use must be reset (or given a
/// random start by the test).
struct DevPool {
  GpuCfg s;
  int64_t slots, R, gw;
  DeviceBuffer state, ring_u, ring_k, ring_g, origin, h, flush;
  static constexpr int kBuffers = 7;
  static constexpr const char* kNames[kBuffers] = {"state",  "ring_u", "ring_k",  "ring_g",
                                                   "origin", "h",      "is_flush"};

  DevPool(const GpuCfg& setup, int64_t R_, Rng& rng)
      : s(setup),
        slots(setup.slots),
        R(R_),
        gw(setup.kda() ? setup.shape.K : 1),
        state(setup.state, {slots, setup.shape.HV, setup.shape.V, setup.shape.K}, 161),
        ring_u(kF32, {slots, setup.shape.HV, R_, setup.shape.V}, 162),
        ring_k(kF32, {slots, setup.shape.H, R_, setup.shape.K}, 163),
        ring_g(kF32,
               setup.kda() ? std::vector<int64_t>{slots, setup.shape.HV, R_, setup.shape.K}
                           : std::vector<int64_t>{slots, setup.shape.HV, R_},
               164),
        origin(DType::kI32, {slots}, 165),
        h(DType::kI32, {slots}, 166),
        flush(DType::kI8, {slots}, 167) {
    fill_pool_garbage({&state, &ring_u, &ring_k, &ring_g}, origin, h, flush, rng);
  }
  gdn::Cache cache() const { return {state.view(), ring_u.view(), ring_k.view(), ring_g.view()}; }
  RingCursors cursors() const { return {origin.view(), h.view(), flush.view(), s.ring}; }
  std::vector<const DeviceBuffer*> buffers() const {
    return {&state, &ring_u, &ring_k, &ring_g, &origin, &h, &flush};
  }
  using Snapshot = std::vector<std::vector<uint8_t>>;
  Snapshot snapshot() const {
    Snapshot out;
    for (const DeviceBuffer* b : buffers()) out.push_back(b->download());
    return out;
  }
  void restore(const Snapshot& snap) {
    DeviceBuffer* bufs[kBuffers] = {&state, &ring_u, &ring_k, &ring_g, &origin, &h, &flush};
    for (int i = 0; i < kBuffers; ++i) bufs[i]->upload(snap[i]);
  }
  /// Device-to-device copy of a pool of the same geometry and dtypes.
  void copy_from(const DevPool& o) {
    state.copy_from(o.state), ring_u.copy_from(o.ring_u), ring_k.copy_from(o.ring_k);
    ring_g.copy_from(o.ring_g), origin.copy_from(o.origin), h.copy_from(o.h);
    flush.copy_from(o.flush);
  }
  bool guards_intact() const {
    for (const DeviceBuffer* b : buffers())
      if (!b->guards_intact()) return false;
    return true;
  }
  Cursor cursor(const Snapshot& snap, int32_t slot) const {
    return {static_cast<int32_t>(cuda_test::decode(DType::kI32, snap[4].data(), slot)),
            static_cast<int32_t>(cuda_test::decode(DType::kI32, snap[5].data(), slot)),
            cuda_test::decode(DType::kI8, snap[6].data(), slot) != 0};
  }
  void set_cursor(int32_t slot, const Cursor& c) {
    std::vector<double> o = origin.values(), hv = h.values(), f = flush.values();
    o[slot] = c.origin, hv[slot] = c.h, f[slot] = c.is_flush ? 1 : 0;
    origin.set_values(o), h.set_values(hv), flush.set_values(f);
  }
  /// "" when two snapshots agree on every byte of `slot` (every buffer has the slot leading).
  std::string slot_diff(const Snapshot& a, const Snapshot& b, int32_t slot) const {
    for (int k = 0; k < kBuffers; ++k) {
      const size_t len = a[k].size() / static_cast<size_t>(slots);
      const size_t off = static_cast<size_t>(slot) * len;
      if (std::memcmp(a[k].data() + off, b[k].data() + off, len) != 0)
        return std::string(kNames[k]) + " of slot " + std::to_string(slot) + " changed";
    }
    return "";
  }
  // Element offsets.
  int64_t state_per_slot() const { return s.shape.HV * s.shape.V * s.shape.K; }
  int64_t u_at(int64_t slot, int64_t vh, int64_t row) const {
    return ((slot * s.shape.HV + vh) * R + row) * s.shape.V;
  }
  int64_t k_at(int64_t slot, int64_t kh, int64_t row) const {
    return ((slot * s.shape.H + kh) * R + row) * s.shape.K;
  }
  int64_t g_at(int64_t slot, int64_t vh, int64_t row) const {
    return ((slot * s.shape.HV + vh) * R + row) * gw;
  }
  /// The record at physical row `row` of `slot`, from downloaded ring values.
  ref::GdnRecord record(const std::vector<double>& u, const std::vector<double>& k,
                        const std::vector<double>& g, int64_t slot, int64_t row) const {
    ref::GdnRecord rec;
    for (int64_t vh = 0; vh < s.shape.HV; ++vh)
      rec.u.insert(rec.u.end(), u.begin() + u_at(slot, vh, row),
                   u.begin() + u_at(slot, vh, row) + s.shape.V);
    for (int64_t kh = 0; kh < s.shape.H; ++kh)
      rec.k.insert(rec.k.end(), k.begin() + k_at(slot, kh, row),
                   k.begin() + k_at(slot, kh, row) + s.shape.K);
    for (int64_t vh = 0; vh < s.shape.HV; ++vh)
      rec.g.insert(rec.g.end(), g.begin() + g_at(slot, vh, row),
                   g.begin() + g_at(slot, vh, row) + gw);
    return rec;
  }
  /// Writes a record into host copies of the ring buffers (physical row `row` of `slot`).
  void put_record(std::vector<double>& u, std::vector<double>& k, std::vector<double>& g,
                  int64_t slot, int64_t row, const ref::GdnRecord& rec) const {
    for (int64_t vh = 0; vh < s.shape.HV; ++vh)
      for (int64_t r = 0; r < s.shape.V; ++r)
        u[u_at(slot, vh, row) + r] = rec.u[vh * s.shape.V + r];
    for (int64_t kh = 0; kh < s.shape.H; ++kh)
      for (int64_t c = 0; c < s.shape.K; ++c)
        k[k_at(slot, kh, row) + c] = rec.k[kh * s.shape.K + c];
    for (int64_t vh = 0; vh < s.shape.HV; ++vh)
      for (int64_t i = 0; i < gw; ++i) g[g_at(slot, vh, row) + i] = rec.g[vh * gw + i];
  }
};

/// Inputs and outputs of one decode call over `batch` rows ([batch, 1, ...], or without the T
/// axis when rank_no_t). Inputs start as NaN so that a read of a pad row shows up.
struct DevStep {
  int64_t batch;
  GpuCfg s;
  DeviceBuffer q, k, v, a, b, y, ids;

  static std::vector<int64_t> dims(int64_t batch, std::vector<int64_t> rest, bool no_t) {
    std::vector<int64_t> d{batch};
    if (!no_t) d.push_back(1);
    d.insert(d.end(), rest.begin(), rest.end());
    return d;
  }
  DevStep(const GpuCfg& setup, int64_t batch_, bool no_t = false)
      : batch(batch_),
        s(setup),
        q(setup.dtype, dims(batch_, {setup.shape.H, setup.shape.K}, no_t), 171),
        k(setup.dtype, dims(batch_, {setup.shape.H, setup.shape.K}, no_t), 172),
        v(setup.dtype, dims(batch_, {setup.shape.HV, setup.shape.V}, no_t), 173),
        a(setup.dtype,
          dims(batch_,
               setup.kda() ? std::vector<int64_t>{setup.shape.HV, setup.shape.K}
                           : std::vector<int64_t>{setup.shape.HV},
               no_t),
          174),
        b(setup.dtype, dims(batch_, {setup.shape.HV}, no_t), 175),
        y(setup.dtype, dims(batch_, {setup.shape.HV, setup.shape.V}, no_t), 176),
        ids(DType::kI32, {batch_}, 177) {
    for (DeviceBuffer* buf : {&q, &k, &v, &a, &b}) buf->poison();
  }
  /// Uploads the tokens of the real rows (nullptr: pad row, its inputs stay NaN) and the ids.
  void put(const std::vector<const ref::GdnToken*>& toks, const std::vector<int32_t>& slot_ids) {
    std::vector<double> vq = q.values(), vk = k.values(), vv = v.values(), va = a.values(),
                        vb = b.values();
    auto place = [&](std::vector<double>& dst, const Vec& src, int64_t row) {
      std::copy(src.begin(), src.end(), dst.begin() + row * static_cast<int64_t>(src.size()));
    };
    for (int64_t r = 0; r < batch; ++r) {
      const ref::GdnToken* t = toks[r];
      if (!t) continue;
      place(vq, t->q, r), place(vk, t->k, r), place(vv, t->v, r), place(va, t->a, r);
      place(vb, t->b, r);
    }
    q.set_values(vq), k.set_values(vk), v.set_values(vv), a.set_values(va), b.set_values(vb);
    ids.set_values(std::vector<double>(slot_ids.begin(), slot_ids.end()));
  }
  gdn::Tokens tokens() const { return {q.view(), k.view(), v.view(), a.view(), b.view()}; }
  Rows rows(int32_t pad) const {
    Rows r;
    r.slot_ids = ids.view();
    r.pad_slot_id = pad;
    return r;
  }
  /// y of row r as doubles [HV * V].
  Vec y_row(const std::vector<double>& all, int64_t r) const {
    const int64_t n = s.shape.HV * s.shape.V;
    return Vec(all.begin() + r * n, all.begin() + (r + 1) * n);
  }
  bool guards_intact() const {
    for (const DeviceBuffer* buf : {&q, &k, &v, &a, &b, &y, &ids})
      if (!buf->guards_intact()) return false;
    return true;
  }
};

/// Device reset of slots: gdn::reset_slots (checkpoint zeroed) and replayssm::reset (cursors).
inline void reset_slots(DevPool& pool, const std::vector<int32_t>& slots, int32_t pad = -1) {
  DeviceBuffer ids(DType::kI32, {static_cast<int64_t>(slots.size())}, 178);
  ids.set_values(std::vector<double>(slots.begin(), slots.end()));
  Rows rows;
  rows.slot_ids = ids.view();
  rows.pad_slot_id = pad;
  gdn::Cache cache = pool.cache();
  gdn::reset_slots(cache, rows);
  RingCursors cur = pool.cursors();
  replayssm::reset(cur, rows);
  cuda::device_synchronize();
}

/// Device commit of one decode step: 1 accepted token per real row, 0 for pad rows.
inline void commit_step(DevPool& pool, const std::vector<int32_t>& ids, int32_t pad,
                        void* stream = nullptr) {
  DeviceBuffer acc(DType::kI32, {static_cast<int64_t>(ids.size())}, 179);
  std::vector<double> av(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) av[i] = ids[i] == pad ? 0 : 1;
  acc.set_values(av);
  DeviceBuffer idb(DType::kI32, {static_cast<int64_t>(ids.size())}, 180);
  idb.set_values(std::vector<double>(ids.begin(), ids.end()));
  Rows rows;
  rows.slot_ids = idb.view();
  rows.pad_slot_id = pad;
  rows.stream = stream;
  // The uploads above ran on the legacy default stream, which a non-blocking `stream` does not
  // wait for: finish them before the commit reads them.
  cuda::device_synchronize();
  RingCursors cur = pool.cursors();
  replayssm::commit(cur, rows, acc.view());
  if (stream)
    cuda::stream_synchronize(stream);
  else
    cuda::device_synchronize();
}

/// Distinct random slots of a pool.
inline std::vector<int32_t> pick_slots(Rng& rng, int64_t slots, int n) {
  std::vector<int32_t> all(static_cast<size_t>(slots));
  for (int64_t i = 0; i < slots; ++i) all[i] = static_cast<int32_t>(i);
  rng.shuffle(all);
  return std::vector<int32_t>(all.begin(), all.begin() + n);
}

}  // namespace replayssm::testing::gdn_cuda
#endif  // RSSM_WITH_CUDA
