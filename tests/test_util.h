// Shared test helpers: seeded randomness, guarded NaN-poisoned buffers, tolerance checks.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "replayssm/tensor.h"

namespace replayssm::testing {

/// Seed for randomized tests: RSSM_SEED from the environment, else the given default. Tests print
/// it (SCOPED_TRACE) so a failure can be replayed.
inline uint64_t test_seed(uint64_t fallback) {
  if (const char* s = std::getenv("RSSM_SEED")) return std::strtoull(s, nullptr, 10);
  return fallback;
}

struct Rng {
  std::mt19937_64 gen;
  explicit Rng(uint64_t seed) : gen(seed) {}
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen); }
  double normal(double mean = 0.0, double sd = 1.0) {
    return std::normal_distribution<double>(mean, sd)(gen);
  }
  int64_t integer(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen);
  }
  template <class T> void shuffle(std::vector<T>& v) { std::shuffle(v.begin(), v.end(), gen); }
};

/// A host buffer with random guard bytes on both sides of the payload. view() exposes the payload;
/// guards_intact() says whether anything wrote outside it.
class GuardedBuffer {
 public:
  static constexpr size_t kGuard = 256;
  GuardedBuffer() = default;
  GuardedBuffer(DType dtype, std::vector<int64_t> shape, uint64_t seed = 1234)
      : dtype_(dtype), shape_(std::move(shape)) {
    numel_ = 1;
    for (int64_t s : shape_) numel_ *= s;
    bytes_.resize(2 * kGuard + static_cast<size_t>(numel_ * dtype_size(dtype_)) + 64);
    std::mt19937_64 g(seed);
    for (auto& b : bytes_) b = static_cast<uint8_t>(g());
    guard_copy_ = bytes_;
  }
  TensorView view() const {
    TensorView t;
    t.data = const_cast<uint8_t*>(bytes_.data()) + kGuard;
    t.dtype = dtype_;
    t.ndim = static_cast<int>(shape_.size());
    int64_t st = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      t.shape[i] = shape_[i];
      t.stride[i] = st;
      st *= shape_[i];
    }
    return t;
  }
  int64_t numel() const { return numel_; }
  bool guards_intact() const {
    const size_t payload = static_cast<size_t>(numel_ * dtype_size(dtype_));
    return std::memcmp(bytes_.data(), guard_copy_.data(), kGuard) == 0 &&
           std::memcmp(bytes_.data() + kGuard + payload, guard_copy_.data() + kGuard + payload,
                       bytes_.size() - kGuard - payload) == 0;
  }
  /// Element i as float (f32 / bf16 / f64 buffers).
  float get(int64_t i) const { return load_f32(view(), i); }
  void set(int64_t i, float v) { store_f32(view(), i, v); }
  template <class T> T* data() { return reinterpret_cast<T*>(bytes_.data() + kGuard); }
  template <class T> const T* data() const {
    return reinterpret_cast<const T*>(bytes_.data() + kGuard);
  }
  /// Fill the payload with quiet NaN (float formats) or 0x7f bytes (others).
  void poison() {
    if (dtype_ == DType::kF32 || dtype_ == DType::kBF16) {
      for (int64_t i = 0; i < numel_; ++i) set(i, std::numeric_limits<float>::quiet_NaN());
    } else {
      std::memset(bytes_.data() + kGuard, 0x7f, static_cast<size_t>(numel_ * dtype_size(dtype_)));
    }
  }
  /// Raw payload bytes (for bit-identity checks).
  std::vector<uint8_t> payload() const {
    const auto* p = bytes_.data() + kGuard;
    return std::vector<uint8_t>(p, p + numel_ * dtype_size(dtype_));
  }

 private:
  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  std::vector<uint8_t> bytes_, guard_copy_;
};

/// Round a double through the storage dtype (what a kernel sees after loading it).
inline double through(DType t, double v) {
  if (t == DType::kBF16) return bf16_to_f32(f32_to_bf16(static_cast<float>(v)));
  if (t == DType::kF32) return static_cast<float>(v);
  return v;
}

/// max |a - b| / (atol_scale + max|b|): a relative error normalised by the reference's magnitude.
inline double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0.0, den = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    num = std::max(num, std::abs(a[i] - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return num / den;
}

}  // namespace replayssm::testing
