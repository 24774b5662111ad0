// Device memory of a CUDA model: one owner for every allocation (weights, caches, scratch), freed
// together; uploads of float32 host tensors as float32 or bfloat16 (round to nearest even).
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "cpu/ops.h"
#include "cuda/kernels.h"
#include "replayssm/tensor.h"

namespace replayssm::engine::cuda {

/// An nn.Linear on the device: y = x W^T (+ bias). w bf16 [out, in] (torch layout), bias fp32 [out]
/// or nullptr.
struct DeviceLinear {
  const bf16* w = nullptr;
  const float* bias = nullptr;
  int64_t out = 0, in = 0;
};

/// A contiguous CUDA view of `data` (the library ops' tensor type).
TensorView device_view(void* data, DType dtype, std::initializer_list<int64_t> shape);

class DeviceArena {
 public:
  DeviceArena() = default;
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  ~DeviceArena();

  /// A zeroed allocation of `bytes` (256-byte aligned). DeviceError on failure.
  void* alloc(size_t bytes);
  template <class T>
  T* alloc_n(int64_t n) {
    return static_cast<T*>(alloc(static_cast<size_t>(n) * sizeof(T)));
  }
  float* upload_f32(const std::vector<float>& v);
  bf16* upload_bf16(const std::vector<float>& v);
  /// The parts' rows stacked in order into one bf16 linear (their `in` must agree): one GEMM
  /// computes the concatenation of their outputs. A bias is kept when any part has one (zeros for
  /// parts without).
  DeviceLinear upload_linear(std::initializer_list<const cpu::Linear*> parts);
  /// Bytes allocated so far.
  size_t bytes() const { return bytes_; }

 private:
  std::vector<void*> ptrs_;
  size_t bytes_ = 0;
};

}  // namespace replayssm::engine::cuda
