// Device-side test helpers for the CUDA backend: device buffers with guard bytes and NaN
// poisoning, host encoding of every storage dtype, and the Mamba-2 device containers (layer
// parameters, slot pool, step inputs) of the GPU tests. Only compiled with the CUDA backend
// (RSSM_WITH_CUDA); GPU tests skip with the reason where no device is present.
#pragma once
#ifdef RSSM_WITH_CUDA
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "cuda/common/memory.h"
#include "cuda/device.h"
#include "replayssm/mamba2.h"
#include "replayssm/ring.h"
#include "replayssm/tensor.h"
#include "test_mamba2_util.h"

/// First statement of every GPU test (the summary reads "no CUDA device: <why>").
#define RSSM_SKIP_WITHOUT_CUDA()                           \
  do {                                                     \
    if (::replayssm::cuda::device_count() == 0)            \
      GTEST_SKIP() << ::replayssm::cuda::device_summary(); \
  } while (0)

namespace replayssm::testing::cuda_test {

// ---- host encoding of the storage dtypes
// -----------------------------------------------------------

/// float -> IEEE half, round to nearest even (overflow to inf, NaN kept).
inline uint16_t f32_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  if (std::isnan(f)) return sign | 0x7e00u;
  const double a = std::fabs(static_cast<double>(f));
  if (a < 0x1p-14)
    return sign | static_cast<uint16_t>(std::nearbyint(a * 0x1p24));  // 1024 = min normal
  int e;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  int E = e - 1;
  double m = std::nearbyint(std::ldexp(a, 10 - E));  // in [1024, 2048]
  if (m == 2048.0) m = 1024.0, ++E;
  if (E > 15) return sign | 0x7c00u;
  return sign | static_cast<uint16_t>(((E + 15) << 10) | (static_cast<int>(m) - 1024));
}

inline float f16_to_f32(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double s = (h & 0x8000u) ? -1.0 : 1.0;
  if (e == 0) return static_cast<float>(s * std::ldexp(m, -24));
  if (e == 31) return m ? NAN : static_cast<float>(s * INFINITY);
  return static_cast<float>(s * std::ldexp(1024 + m, e - 25));
}

/// The value v becomes once stored in dtype t (and read back).
inline double round_to(DType t, double v) {
  switch (t) {
    case DType::kF32:
      return static_cast<float>(v);
    case DType::kBF16:
      return bf16_to_f32(f32_to_bf16(static_cast<float>(v)));
    case DType::kF16:
      return f16_to_f32(f32_to_f16(static_cast<float>(v)));
    default:
      return v;
  }
}

/// Unit roundoff of storing a float32 value in t (0 for float32 itself).
inline double store_roundoff(DType t) {
  return t == DType::kBF16 ? 0x1p-8 : t == DType::kF16 ? 0x1p-11 : 0.0;
}

/// Absolute part of that rounding: below float16's smallest normal (2^-14) values are subnormal
/// with a fixed spacing of 2^-24, so round-to-nearest errs by up to 2^-25 whatever the magnitude
/// (bfloat16 and float32 subnormals lie below 1e-38, far beneath any bound here).
inline double store_abs_roundoff(DType t) { return t == DType::kF16 ? 0x1p-25 : 0.0; }

inline void encode(DType t, void* dst, int64_t i, double v) {
  switch (t) {
    case DType::kF32:
      static_cast<float*>(dst)[i] = static_cast<float>(v);
      break;
    case DType::kBF16:
      static_cast<uint16_t*>(dst)[i] = f32_to_bf16(static_cast<float>(v));
      break;
    case DType::kF16:
      static_cast<uint16_t*>(dst)[i] = f32_to_f16(static_cast<float>(v));
      break;
    case DType::kI32:
      static_cast<int32_t*>(dst)[i] = static_cast<int32_t>(v);
      break;
    case DType::kI8:
      static_cast<int8_t*>(dst)[i] = static_cast<int8_t>(v);
      break;
    default:
      ADD_FAILURE() << "encode: unsupported dtype " << dtype_name(t);
  }
}

inline double decode(DType t, const void* src, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(src)[i];
    case DType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(src)[i]);
    case DType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(src)[i]);
    case DType::kI32:
      return static_cast<const int32_t*>(src)[i];
    case DType::kI8:
      return static_cast<const int8_t*>(src)[i];
    default:
      ADD_FAILURE() << "decode: unsupported dtype " << dtype_name(t);
      return NAN;
  }
}

/// Every element of downloaded bytes of dtype t, as doubles.
inline std::vector<double> decode_all(DType t, const std::vector<uint8_t>& raw) {
  std::vector<double> v(raw.size() / static_cast<size_t>(dtype_size(t)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = decode(t, raw.data(), static_cast<int64_t>(i));
  return v;
}

/// The rows of a split-mode walk's step (test_mamba2_cuda_split_walk.h, test_gdn_cuda_modes.cpp):
/// sequence i of 4 (or -1, a pad row) per row of a batch of 6, in random order; sequence i joins
/// at step 2 i and skips a step with probability 0.1.
inline std::vector<int> split_walk_order(int step, Rng& rng) {
  std::vector<int> order{-1, -1};
  for (int i = 0; i < 4; ++i) order.push_back(step >= 2 * i && rng.uniform(0, 1) < 0.9 ? i : -1);
  rng.shuffle(order);
  return order;
}

// ---- device buffers
// -----------------------------------------------------------------------------------

/// A device allocation with random guard bytes on both sides of the payload (the payload starts
/// 256 bytes in, so it keeps cudaMalloc's alignment). view() exposes the payload as a CUDA view.
class DeviceBuffer {
 public:
  static constexpr size_t kGuard = 256;
  DeviceBuffer() = default;
  DeviceBuffer(DType dtype, std::vector<int64_t> shape, uint64_t seed = 4242)
      : dtype_(dtype), shape_(std::move(shape)) {
    numel_ = 1;
    for (int64_t s : shape_) numel_ *= s;
    pattern_.resize(2 * kGuard + bytes());
    std::mt19937_64 g(seed);
    for (auto& b : pattern_) b = static_cast<uint8_t>(g());
    base_ = static_cast<uint8_t*>(cuda::device_malloc(pattern_.size()));
    cuda::copy_to_device(base_, pattern_.data(), pattern_.size());
  }
  ~DeviceBuffer() {
    if (base_) cuda::device_free(base_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(base_, o.base_);
    std::swap(dtype_, o.dtype_);
    std::swap(shape_, o.shape_);
    std::swap(numel_, o.numel_);
    std::swap(pattern_, o.pattern_);
    return *this;
  }

  TensorView view() const {
    TensorView t;
    t.data = base_ + kGuard;
    t.dtype = dtype_;
    t.device = Device::kCUDA;
    t.ndim = static_cast<int>(shape_.size());
    int64_t st = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      t.shape[i] = shape_[i];
      t.stride[i] = st;
      st *= shape_[i];
    }
    return t;
  }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return numel_; }
  size_t bytes() const { return static_cast<size_t>(numel_ * dtype_size(dtype_)); }

  std::vector<uint8_t> download() const {
    std::vector<uint8_t> out(bytes());
    if (!out.empty()) cuda::copy_to_host(out.data(), base_ + kGuard, out.size());
    return out;
  }
  void upload(const std::vector<uint8_t>& payload) {
    ASSERT_EQ(payload.size(), bytes());
    if (!payload.empty()) cuda::copy_to_device(base_ + kGuard, payload.data(), payload.size());
  }
  /// The payload decoded to doubles / encoded from doubles (rounded to the dtype).
  std::vector<double> values() const { return decode_all(dtype_, download()); }
  void set_values(const std::vector<double>& v) {
    ASSERT_EQ(static_cast<int64_t>(v.size()), numel_);
    std::vector<uint8_t> raw(bytes());
    for (int64_t i = 0; i < numel_; ++i) encode(dtype_, raw.data(), i, v[i]);
    upload(raw);
  }
  /// Copies the payload of a buffer of the same size (device to device).
  void copy_from(const DeviceBuffer& other) {
    ASSERT_EQ(other.bytes(), bytes());
    if (bytes()) cuda::copy_device_to_device(base_ + kGuard, other.base_ + kGuard, bytes());
  }
  /// Every payload byte 0xFF: NaN in float32, float16 and bfloat16 (and -1 in integers).
  void poison() {
    if (numel_) cuda::device_memset(base_ + kGuard, 0xFF, bytes());
  }
  bool guards_intact() const {
    std::vector<uint8_t> all(pattern_.size());
    cuda::copy_to_host(all.data(), base_, all.size());
    return std::memcmp(all.data(), pattern_.data(), kGuard) == 0 &&
           std::memcmp(all.data() + kGuard + bytes(), pattern_.data() + kGuard + bytes(), kGuard) ==
               0;
  }

 private:
  uint8_t* base_ = nullptr;
  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  std::vector<uint8_t> pattern_;  // the guard bytes as written (payload part unused)
};

/// Fills a pool's state and ring buffers with large random values and its cursors with random,
/// partly out-of-range values, so a kernel that reads what it should not (or a test that forgets
/// to set a cursor) shows up.
inline void fill_pool_garbage(std::initializer_list<DeviceBuffer*> data, DeviceBuffer& origin,
                              DeviceBuffer& h, DeviceBuffer& flush, Rng& rng) {
  for (DeviceBuffer* b : data) {
    std::vector<double> v(static_cast<size_t>(b->numel()));
    for (double& e : v) e = rng.normal(0, 10);
    b->set_values(v);
  }
  for (DeviceBuffer* b : {&origin, &h}) {
    std::vector<double> v(static_cast<size_t>(origin.numel()));
    for (double& e : v) e = static_cast<double>(rng.integer(-5, 100));
    b->set_values(v);
  }
  std::vector<double> f(static_cast<size_t>(flush.numel()));
  for (double& e : f) e = static_cast<double>(rng.integer(0, 1));
  flush.set_values(f);
}

/// Starts sequences on `slots` of a pool through the public API: the family's reset_slots on
/// `cache` (found by argument-dependent lookup: mamba2:: or gdn::; the mode's buffers too) and
/// replayssm::reset of the cursors; synchronises.
template <class Cache>
void start_sequences(Cache cache, RingCursors cursors, const std::vector<int32_t>& slots) {
  DeviceBuffer ids(DType::kI32, {static_cast<int64_t>(slots.size())}, 178);
  ids.set_values(std::vector<double>(slots.begin(), slots.end()));
  Rows rows;
  rows.slot_ids = ids.view();
  reset_slots(cache, rows);
  replayssm::reset(cursors, rows);
  cuda::device_synchronize();
}

// ---- Mamba-2 device containers
// ---------------------------------------------------------------------

/// A layer's parameters on the device, from the host Params of test_mamba2_util.h.
struct DevLayer {
  DeviceBuffer A_log, dt_bias, D;
  mamba2::Layer layer;
  explicit DevLayer(const m2::Params& prm)
      : A_log(DType::kF32, {prm.shape.H}, 51),
        dt_bias(DType::kF32, {prm.shape.H}, 52),
        D(DType::kF32, {prm.shape.H}, 53) {
    A_log.set_values(prm.ref.A_log);
    dt_bias.set_values(prm.ref.dt_bias);
    layer.dims = {prm.shape.H, prm.shape.P, prm.shape.N, prm.shape.G};
    layer.A_log = A_log.view();
    layer.dt_bias = dt_bias.view();
    if (!prm.ref.D.empty()) {
      D.set_values(prm.ref.D);
      layer.D = D.view();
    }
    layer.dt_softplus = prm.ref.dt_softplus;
  }
  bool guards_intact() const {
    return A_log.guards_intact() && dt_bias.guards_intact() && D.guards_intact();
  }
};

/// A layer's slot pool on the device: state/checkpoint, ring and cursors, all guarded. Filled
/// with finite random garbage (state, ring) and out-of-range cursors: a slot in use must be reset.
struct DevPool {
  m2::Shape s;
  int64_t slots, R;
  DType state_t, ring_t;
  DeviceBuffer state, ring_x, ring_dt, ring_B, origin, h, flush;

  DevPool(const m2::Shape& shape, int64_t slots_, int64_t R_, DType state_dtype, DType ring_dtype,
          Rng& rng)
      : s(shape),
        slots(slots_),
        R(R_),
        state_t(state_dtype),
        ring_t(ring_dtype),
        state(state_dtype, {slots_, shape.H, shape.P, shape.N}, 61),
        ring_x(ring_dtype, {slots_, shape.H, R_, shape.P}, 62),
        ring_dt(DType::kF32, {slots_, shape.H, R_}, 63),
        ring_B(ring_dtype, {slots_, shape.G, R_, shape.N}, 64),
        origin(DType::kI32, {slots_}, 65),
        h(DType::kI32, {slots_}, 66),
        flush(DType::kI8, {slots_}, 67) {
    fill_pool_garbage({&state, &ring_x, &ring_dt, &ring_B}, origin, h, flush, rng);
  }
  mamba2::Cache cache() const {
    return {state.view(), ring_x.view(), ring_dt.view(), ring_B.view()};
  }
  RingCursors cursors(const RingConfig& cfg) const {
    return {origin.view(), h.view(), flush.view(), cfg};
  }
  std::vector<const DeviceBuffer*> buffers() const {
    return {&state, &ring_x, &ring_dt, &ring_B, &origin, &h, &flush};
  }
  using Snapshot = std::vector<std::vector<uint8_t>>;
  Snapshot snapshot() const {
    Snapshot out;
    for (const DeviceBuffer* b : buffers()) out.push_back(b->download());
    return out;
  }
  void restore(const Snapshot& snap) {
    std::vector<DeviceBuffer*> bufs{&state, &ring_x, &ring_dt, &ring_B, &origin, &h, &flush};
    for (size_t i = 0; i < bufs.size(); ++i) bufs[i]->upload(snap[i]);
  }
  bool guards_intact() const {
    for (const DeviceBuffer* b : buffers())
      if (!b->guards_intact()) return false;
    return true;
  }
  /// Device-to-device copy of another pool of the same geometry.
  void copy_from(const DevPool& o) {
    state.copy_from(o.state), ring_x.copy_from(o.ring_x), ring_dt.copy_from(o.ring_dt);
    ring_B.copy_from(o.ring_B), origin.copy_from(o.origin), h.copy_from(o.h);
    flush.copy_from(o.flush);
  }
  Cursor cursor(const Snapshot& snap, int32_t slot) const {
    return {static_cast<int32_t>(decode(DType::kI32, snap[4].data(), slot)),
            static_cast<int32_t>(decode(DType::kI32, snap[5].data(), slot)),
            decode(DType::kI8, snap[6].data(), slot) != 0};
  }
  // Element offsets of one slot's regions.
  int64_t state_at(int64_t slot) const { return slot * s.H * s.P * s.N; }
  int64_t x_at(int64_t slot, int64_t hd, int64_t row) const {
    return ((slot * s.H + hd) * R + row) * s.P;
  }
  int64_t dt_at(int64_t slot, int64_t hd, int64_t row) const { return (slot * s.H + hd) * R + row; }
  int64_t B_at(int64_t slot, int64_t g, int64_t row) const {
    return ((slot * s.G + g) * R + row) * s.N;
  }
};

/// Inputs and outputs of one decode call over `batch` rows ([batch, H, P] etc., no T axis when
/// rank3, else [batch, 1, ...]). Inputs start as NaN so that a read of a pad row shows up.
struct DevStep {
  int64_t batch, H, P, G, N;
  DType in_t, dt_t;
  bool with_z;
  DeviceBuffer x, dt, B, C, z, y, ids;

  static std::vector<int64_t> dims(int64_t b, int64_t a, int64_t c, bool rank3) {
    return rank3 ? std::vector<int64_t>{b, a, c} : std::vector<int64_t>{b, 1, a, c};
  }
  DevStep(const m2::Params& prm, int64_t batch_, bool rank3 = false)
      : batch(batch_),
        H(prm.shape.H),
        P(prm.shape.P),
        G(prm.shape.G),
        N(prm.shape.N),
        in_t(prm.opt.dtype),
        dt_t(prm.dt_dtype()),
        with_z(prm.opt.z),
        x(in_t, dims(batch_, H, P, rank3), 71),
        dt(dt_t, rank3 ? std::vector<int64_t>{batch_, H} : std::vector<int64_t>{batch_, 1, H}, 72),
        B(in_t, dims(batch_, G, N, rank3), 73),
        C(in_t, dims(batch_, G, N, rank3), 74),
        z(in_t, dims(batch_, H, P, rank3), 75),
        y(in_t, dims(batch_, H, P, rank3), 76),
        ids(DType::kI32, {batch_}, 77) {
    for (DeviceBuffer* b : {&x, &dt, &B, &C, &z}) b->poison();
  }
  /// Upload the tokens of the real rows (nullptr: pad row, its inputs stay NaN) and the ids.
  void put(const std::vector<const ref::Mamba2Token*>& toks, const std::vector<int32_t>& slot_ids) {
    std::vector<double> vx = x.values(), vdt = dt.values(), vB = B.values(), vC = C.values(),
                        vz = z.values();
    for (int64_t b = 0; b < batch; ++b) {
      const ref::Mamba2Token* t = toks[b];
      if (!t) continue;
      for (int64_t i = 0; i < H * P; ++i) {
        vx[b * H * P + i] = t->x[i];
        if (with_z) vz[b * H * P + i] = t->z[i];
      }
      for (int64_t i = 0; i < H; ++i) vdt[b * H + i] = t->dt[i];
      for (int64_t i = 0; i < G * N; ++i) vB[b * G * N + i] = t->B[i], vC[b * G * N + i] = t->C[i];
    }
    x.set_values(vx), dt.set_values(vdt), B.set_values(vB), C.set_values(vC), z.set_values(vz);
    std::vector<double> vid(slot_ids.begin(), slot_ids.end());
    ids.set_values(vid);
  }
  mamba2::Tokens tokens() const {
    mamba2::Tokens t{x.view(), dt.view(), B.view(), C.view(), {}};
    if (with_z) t.z = z.view();
    return t;
  }
  Rows rows(int32_t pad) const {
    Rows r;
    r.slot_ids = ids.view();
    r.pad_slot_id = pad;
    return r;
  }
  bool guards_intact() const {
    return x.guards_intact() && dt.guards_intact() && B.guards_intact() && C.guards_intact() &&
           z.guards_intact() && y.guards_intact() && ids.guards_intact();
  }
};

/// Runs launch(v) for v = 0 and 1 (two plans that must agree to the bit), each from `start`
/// copied into `pool` with the output `st.y` poisoned, and expects equal outputs and pools, a pool
/// changed from `start`, and intact guard bytes. Pool and Step: the Mamba-2 or GDN test harness'
/// DevPool (copy_from, snapshot, guards_intact) and DevStep (y, guards_intact).
template <class Pool, class Step, class Launch>
void expect_two_plans_bit_identical(Pool& pool, const Pool& start, Step& st, Launch&& launch) {
  std::vector<uint8_t> y[2];
  typename Pool::Snapshot after[2];
  for (int v : {0, 1}) {
    pool.copy_from(start);
    st.y.poison();
    launch(v);
    cuda::device_synchronize();
    y[v] = st.y.download(), after[v] = pool.snapshot();
  }
  EXPECT_TRUE(y[0] == y[1]) << "y differs";
  EXPECT_TRUE(after[0] == after[1]) << "pool (checkpoints, rings, cursors) differs";
  EXPECT_FALSE(after[1] == start.snapshot()) << "the step changed nothing";
  EXPECT_TRUE(pool.guards_intact() && st.guards_intact()) << "guard bytes overwritten";
}

}  // namespace replayssm::testing::cuda_test
#endif  // RSSM_WITH_CUDA
