#include "read_copy.h"

#include <string>

#include "device_fill.h"
#include "slot_pool.h"

namespace replayssm::bench {

StateMode split_mode(DType checkpoint, StateFormat read) {
  if (read == StateFormat::kFp32) return StateMode{};
  return StateMode{checkpoint == DType::kF16 ? StateFormat::kFp16Sr : StateFormat::kFp32, read,
                   false};
}

ReadCopy::ReadCopy(const StateMode& mode, int64_t slots, int64_t heads, int64_t rows, int64_t n,
                   uint64_t seed, cudaStream_t stream)
    : mode_(mode), slots_(slots), heads_(heads), rows_(rows), n_(n) {
  const int64_t m = slots * heads * rows * n;
  const StateFormat f = mode.has_read_copy() ? mode.read : StateFormat::kFp32;
  if (f == StateFormat::kBf16 || f == StateFormat::kFp16) {
    const DType t = f == StateFormat::kBf16 ? DType::kBF16 : DType::kF16;
    values_ = DeviceMemory(nbytes(m, t));
    fill_uniform(values_.get(), t, m, -1.0f, 1.0f, seed, stream);
  } else if (f == StateFormat::kFp8) {
    values_ = DeviceMemory(m);
    BENCH_CUDA(cudaMemsetAsync(values_.get(), 0x30, m, stream));  // E4M3 0.5
    scales_ = DeviceMemory(nbytes(m / n, DType::kF32));
    fill_uniform(scales_.get(), DType::kF32, m / n, 0.001f, 0.01f, seed + 1, stream);
  } else if (f == StateFormat::kNvfp4) {
    values_ = DeviceMemory(m / 2);
    BENCH_CUDA(cudaMemsetAsync(values_.get(), 0x2a, m / 2, stream));  // E2M1 1, -1
    scales_ = DeviceMemory(m / 16);
    BENCH_CUDA(cudaMemsetAsync(scales_.get(), 0x38, m / 16, stream));  // E4M3 1.0
    global_ = DeviceMemory(nbytes(slots * heads, DType::kF32));
    fill_uniform(global_.get(), DType::kF32, slots * heads, 0.001f, 0.01f, seed + 1, stream);
  } else if (f != StateFormat::kFp32) {
    throw BenchError(std::string("a ") + state_format_name(f) + " read copy is not benchmarked");
  }
  if (mode.uses_sr()) {
    seeds_ = DeviceMemory(nbytes(slots, DType::kI64));  // any bits
    steps_ = DeviceMemory(nbytes(slots, DType::kI32));  // step counters from 0
    BENCH_CUDA(cudaMemsetAsync(seeds_.get(), 0x5a, nbytes(slots, DType::kI64), stream));
    BENCH_CUDA(cudaMemsetAsync(steps_.get(), 0, nbytes(slots, DType::kI32), stream));
  }
}

StateBuffer ReadCopy::buffer() const {
  StateBuffer b;
  if (!mode_.has_read_copy()) return b;
  const int64_t S = slots_, H = heads_, P = rows_, N = n_;
  const DType u8 = DType::kU8, f32 = DType::kF32;
  const StateFormat f = mode_.read;
  if (f == StateFormat::kNvfp4) {
    b.values = device_view(values_, 0, u8, {S, H, P, N / 2});
    b.scales.blocks = device_view(scales_, 0, u8, {S, H, P, N / 16});
    b.scales.global = device_view(global_, 0, f32, {S, H});
  } else if (f == StateFormat::kFp8) {
    b.values = device_view(values_, 0, u8, {S, H, P, N});
    b.scales.rows = device_view(scales_, 0, f32, {S, H, P});
  } else if (f == StateFormat::kBf16 || f == StateFormat::kFp16) {
    b.values = device_view(values_, 0, f == StateFormat::kBf16 ? DType::kBF16 : DType::kF16,
                           {S, H, P, N});
  }
  return b;
}

SrKeys ReadCopy::sr() const {
  if (!mode_.uses_sr()) return SrKeys{};
  return SrKeys{device_view(seeds_, 0, DType::kI64, {slots_}),
                device_view(steps_, 0, DType::kI32, {slots_})};
}

}  // namespace replayssm::bench
