// The codecs of include/replayssm/codecs.h: validate every argument (typed errors naming the
// argument, the actual and the expected value) before anything is touched, then run on the
// tensors' device: the CPU loops below, or src/cuda/codecs for CUDA tensors. Both apply the
// per-element math of codec_math.h, so they agree bit for bit.
#include "replayssm/codecs.h"

#include <array>
#include <string>

#include "codec_math.h"
#include "validate.h"
#ifdef RSSM_WITH_CUDA
#include "cuda/codecs/codecs_cuda.h"
#endif

namespace replayssm::codecs {
namespace {

using validate::kAny;
constexpr DType kF32 = DType::kF32, kU8 = DType::kU8;

std::string arg(const char* op, const char* name) { return std::string(op) + " " + name; }

[[noreturn]] void no_cuda(const char* op) {
  throw UnsupportedError(std::string(op) +
                         ": replayssm was built without the CUDA backend (use CPU tensors)");
}

/// Rows and columns of a rank-2 float32 tensor named `name`.
void rows_cols(const TensorView& t, const char* op, const char* name, DType dtype, Device dev,
               int64_t& rows, int64_t& n) {
  validate::expect(t, arg(op, name).c_str(), {kAny, kAny}, {dtype}, dev);
  rows = t.shape[0];
  n = t.shape[1];
}

/// Checks the NVFP4 side tensors against logical shape [rows, n].
void check_nvfp4(const Nvfp4& q, int64_t rows, int64_t n, Device dev, const char* op) {
  check<ShapeError>(n > 0 && n % kNvfp4Block == 0, op, ": row length n = ", n,
                    ", expected a positive multiple of ", kNvfp4Block, " (the NVFP4 block)");
  check<ConfigError>(q.group_rows >= 1, op, ": group_rows = ", q.group_rows, ", expected >= 1");
  check<ShapeError>(rows % q.group_rows == 0, op, ": rows = ", rows,
                    ", expected a multiple of group_rows = ", q.group_rows);
  validate::expect(q.codes, arg(op, "codes").c_str(), {rows, n / 2}, {kU8}, dev);
  validate::expect(q.block_scales, arg(op, "block_scales").c_str(), {rows, n / kNvfp4Block}, {kU8},
                   dev);
  validate::expect(q.global_scales, arg(op, "global_scales").c_str(), {rows / q.group_rows}, {kF32},
                   dev);
}

// ---- CPU loops ---------------------------------------------------------------------------------

/// Below this many elements a loop runs on one thread (a parallel region costs more).
constexpr int64_t kParallelMin = 1 << 16;

void nvfp4_encode_cpu(const float* x, int64_t rows, int64_t n, int64_t group_rows, uint8_t* codes,
                      uint8_t* scales, float* globals) {
  const int64_t groups = rows / group_rows, group_elems = group_rows * n, nb = n / 16;
#pragma omp parallel for schedule(static) if (rows * n >= kParallelMin)
  for (int64_t g = 0; g < groups; ++g) {
    const float* xg = x + g * group_elems;
    float amax = 0.0f;
    for (int64_t i = 0; i < group_elems; ++i) amax = codec::amax_step(amax, xg[i]);
    const float s2 = codec::nvfp4_global_scale(amax);
    globals[g] = s2;
    for (int64_t b = 0; b < group_rows * nb; ++b)  // block b of the group
      scales[g * group_rows * nb + b] =
          codec::nvfp4_encode_block(xg + b * 16, s2, codes + (g * group_elems + b * 16) / 2);
  }
}

void nvfp4_decode_cpu(const uint8_t* codes, const uint8_t* scales, const float* globals,
                      int64_t rows, int64_t n, int64_t group_rows, float* y) {
  const int64_t nb = n / 16;
#pragma omp parallel for schedule(static) if (rows * n >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float s2 = globals[r / group_rows];
    for (int64_t b = 0; b < nb; ++b) {
      const float sb = codec::nvfp4_block_scale(scales[r * nb + b], s2);
      // The block's 16 possible values, each nvfp4_decode's own: a lookup per element.
      float value[16];
      for (int c = 0; c < 16; ++c) value[c] = codec::nvfp4_decode(static_cast<uint8_t>(c), sb);
      const uint8_t* c = codes + (r * n + b * 16) / 2;
      float* yb = y + r * n + b * 16;
      for (int j = 0; j < 8; ++j) {
        yb[2 * j] = value[c[j] & 0xf];
        yb[2 * j + 1] = value[c[j] >> 4];
      }
    }
  }
}

void fp8_encode_cpu(const float* x, int64_t rows, int64_t n, uint8_t* codes, float* scales) {
#pragma omp parallel for schedule(static) if (rows * n >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float amax = 0.0f;
    for (int64_t j = 0; j < n; ++j) amax = codec::amax_step(amax, xr[j]);
    const float s = codec::fp8_row_scale(amax);
    scales[r] = s;
    for (int64_t j = 0; j < n; ++j) codes[r * n + j] = codec::fp8_encode(xr[j], s);
  }
}

/// e4m3_decode of every code, once: fp8_decode's product and NaN rule then apply per element.
const float* e4m3_values() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = codec::e4m3_decode(static_cast<uint8_t>(c));
    return t;
  }();
  return table.data();
}

void fp8_decode_cpu(const uint8_t* codes, const float* scales, int64_t rows, int64_t n, float* y) {
  const float* value = e4m3_values();
#pragma omp parallel for schedule(static) if (rows * n >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j)  // = codec::fp8_decode(codes[r * n + j], scales[r])
      y[r * n + j] = codec::canonical_nan(codec::mul_rn(value[codes[r * n + j]], scales[r]));
}

void f16_sr_cpu(const float* x, int64_t rows, int64_t n, uint64_t seed, const int32_t* slots,
                const int32_t* steps, uint16_t* y) {
#pragma omp parallel for schedule(static) if (rows * n >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const uint32_t slot = static_cast<uint32_t>(slots[r]), step = static_cast<uint32_t>(steps[r]);
    for (int64_t q = 0; 4 * q < n; ++q) {
      const codec::Philox4 w = codec::sr_block(seed, slot, step, static_cast<uint64_t>(q));
      for (int i = 0; i < 4 && 4 * q + i < n; ++i)
        y[r * n + 4 * q + i] = codec::f16_sr(x[r * n + 4 * q + i], codec::philox_word(w, i));
    }
  }
}

}  // namespace

// ---- public entry points
// -------------------------------------------------------------------------

void nvfp4_encode(const TensorView& x, const Nvfp4& out, void* stream) {
  const char* op = "codecs.nvfp4_encode";
  const Device dev =
      validate::common_device({&x, &out.codes, &out.block_scales, &out.global_scales}, op);
  int64_t rows = 0, n = 0;
  rows_cols(x, op, "x", kF32, dev, rows, n);
  check_nvfp4(out, rows, n, dev, op);
#ifdef RSSM_WITH_CUDA
  if (dev == Device::kCUDA) return cuda::codecs::nvfp4_encode(x, out, stream);
#endif
  if (dev != Device::kCPU) no_cuda(op);
  nvfp4_encode_cpu(x.ptr<float>(), rows, n, out.group_rows, out.codes.ptr<uint8_t>(),
                   out.block_scales.ptr<uint8_t>(), out.global_scales.ptr<float>());
}

void nvfp4_decode(const Nvfp4& in, const TensorView& y, void* stream) {
  const char* op = "codecs.nvfp4_decode";
  const Device dev =
      validate::common_device({&y, &in.codes, &in.block_scales, &in.global_scales}, op);
  int64_t rows = 0, n = 0;
  rows_cols(y, op, "y", kF32, dev, rows, n);
  check_nvfp4(in, rows, n, dev, op);
#ifdef RSSM_WITH_CUDA
  if (dev == Device::kCUDA) return cuda::codecs::nvfp4_decode(in, y, stream);
#endif
  if (dev != Device::kCPU) no_cuda(op);
  nvfp4_decode_cpu(in.codes.ptr<uint8_t>(), in.block_scales.ptr<uint8_t>(),
                   in.global_scales.ptr<float>(), rows, n, in.group_rows, y.ptr<float>());
}

void fp8_encode(const TensorView& x, const Fp8Rows& out, void* stream) {
  const char* op = "codecs.fp8_encode";
  const Device dev = validate::common_device({&x, &out.codes, &out.scales}, op);
  int64_t rows = 0, n = 0;
  rows_cols(x, op, "x", kF32, dev, rows, n);
  validate::expect(out.codes, arg(op, "codes").c_str(), {rows, n}, {kU8}, dev);
  validate::expect(out.scales, arg(op, "scales").c_str(), {rows}, {kF32}, dev);
#ifdef RSSM_WITH_CUDA
  if (dev == Device::kCUDA) return cuda::codecs::fp8_encode(x, out, stream);
#endif
  if (dev != Device::kCPU) no_cuda(op);
  fp8_encode_cpu(x.ptr<float>(), rows, n, out.codes.ptr<uint8_t>(), out.scales.ptr<float>());
}

void fp8_decode(const Fp8Rows& in, const TensorView& y, void* stream) {
  const char* op = "codecs.fp8_decode";
  const Device dev = validate::common_device({&y, &in.codes, &in.scales}, op);
  int64_t rows = 0, n = 0;
  rows_cols(y, op, "y", kF32, dev, rows, n);
  validate::expect(in.codes, arg(op, "codes").c_str(), {rows, n}, {kU8}, dev);
  validate::expect(in.scales, arg(op, "scales").c_str(), {rows}, {kF32}, dev);
#ifdef RSSM_WITH_CUDA
  if (dev == Device::kCUDA) return cuda::codecs::fp8_decode(in, y, stream);
#endif
  if (dev != Device::kCPU) no_cuda(op);
  fp8_decode_cpu(in.codes.ptr<uint8_t>(), in.scales.ptr<float>(), rows, n, y.ptr<float>());
}

void f16_sr_encode(const TensorView& x, const SrKey& key, const TensorView& y, void* stream) {
  const char* op = "codecs.f16_sr_encode";
  const Device dev = validate::common_device({&x, &y, &key.slots, &key.steps}, op);
  int64_t rows = 0, n = 0;
  rows_cols(x, op, "x", kF32, dev, rows, n);
  validate::expect(y, arg(op, "y").c_str(), {rows, n}, {DType::kF16}, dev);
  validate::expect(key.slots, arg(op, "key.slots").c_str(), {rows}, {DType::kI32}, dev);
  validate::expect(key.steps, arg(op, "key.steps").c_str(), {rows}, {DType::kI32}, dev);
#ifdef RSSM_WITH_CUDA
  if (dev == Device::kCUDA) return cuda::codecs::f16_sr_encode(x, key, y, stream);
#endif
  if (dev != Device::kCPU) no_cuda(op);
  f16_sr_cpu(x.ptr<float>(), rows, n, key.seed, key.slots.ptr<int32_t>(), key.steps.ptr<int32_t>(),
             y.ptr<uint16_t>());
}

// ---- scalar building blocks
// ----------------------------------------------------------------------

uint8_t e4m3_encode(float v) { return codec::e4m3_encode(v); }
float e4m3_decode(uint8_t c) { return codec::e4m3_decode(c); }
uint8_t e2m1_encode(float v) { return codec::e2m1_encode(v); }
float e2m1_decode(uint8_t c) { return codec::e2m1_decode(c); }
uint16_t f16_sr(float x, uint32_t word) { return codec::f16_sr(x, word); }

uint32_t sr_word(uint64_t seed, uint32_t slot, uint32_t step, uint64_t index) {
  return codec::philox_word(codec::sr_block(seed, slot, step, index >> 2),
                            static_cast<int>(index & 3));
}

PhiloxWords philox4x32_10(const uint32_t counter[4], const uint32_t key[2]) {
  const codec::Philox4 r =
      codec::philox4x32_10({counter[0], counter[1], counter[2], counter[3]}, key[0], key[1]);
  return {{r.x, r.y, r.z, r.w}};
}

}  // namespace replayssm::codecs
