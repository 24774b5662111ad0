// Framework-free tensor views: a pointer, a dtype, a shape and strides (in elements). The library
// never owns memory passed through a view; callers keep buffers alive for the duration of a call.
// The ops accept contiguous row-major views only for now (StrideError otherwise): views carry
// strides so that a strided kernel can accept them later without an API change.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace replayssm {

enum class DType : uint8_t { kF32, kF16, kBF16, kF64, kI32, kI64, kI8, kU8 };
enum class Device : uint8_t { kCPU, kCUDA };

/// Bytes per element (kU8 also carries packed formats such as NVFP4, two values per byte).
constexpr int64_t dtype_size(DType t) {
  switch (t) {
    case DType::kF64: case DType::kI64: return 8;
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kI8: case DType::kU8: return 1;
  }
  return 0;
}
const char* dtype_name(DType t);
const char* device_name(Device d);

/// A strided view of up to kMaxDims dimensions. A view whose data is nullptr marks an absent
/// optional input, so a present tensor needs a non-null pointer even when it has zero elements.
struct TensorView {
  static constexpr int kMaxDims = 6;
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCPU;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> stride{};  // in elements

  bool empty() const { return data == nullptr; }
  int64_t numel() const;
  bool is_contiguous() const;
  /// "[4, 96, 80] bf16 cuda"
  std::string describe() const;
  /// The view with a size-1 axis inserted at dim (stride chosen so contiguity is preserved).
  TensorView unsqueeze(int dim) const;
  template <class T> T* ptr() const { return static_cast<T*>(data); }
};

/// A contiguous (row-major) view over data.
TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape,
                     Device device = Device::kCPU);

}  // namespace replayssm
