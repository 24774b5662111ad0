#include "cuda/arena.h"

#include <cuda_runtime.h>

#include "common/dtype.h"
#include "cuda/launch_check.h"

namespace replayssm::engine::cuda {

TensorView device_view(void* data, DType dtype, std::initializer_list<int64_t> shape) {
  return make_view(data, dtype, shape, Device::kCUDA);
}

DeviceArena::~DeviceArena() {
  for (void* p : ptrs_) cudaFree(p);
}

void* DeviceArena::alloc(size_t bytes) {
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc (engine)");
  ptrs_.push_back(p);
  bytes_ += bytes;
  check_cuda(cudaMemset(p, 0, bytes == 0 ? 1 : bytes), "cudaMemset (engine)");
  return p;
}

float* DeviceArena::upload_f32(const std::vector<float>& v) {
  float* d = alloc_n<float>(static_cast<int64_t>(v.size()));
  check_cuda(cudaMemcpy(d, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice),
             "cudaMemcpy (engine weights)");
  return d;
}

bf16* DeviceArena::upload_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  const int64_t n = static_cast<int64_t>(v.size());
#pragma omp parallel for schedule(static)  // a 4B model converts ~4e9 values per load
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(v[i]);
  bf16* d = alloc_n<bf16>(static_cast<int64_t>(v.size()));
  check_cuda(cudaMemcpy(d, h.data(), h.size() * sizeof(uint16_t), cudaMemcpyHostToDevice),
             "cudaMemcpy (engine weights)");
  return d;
}

DeviceLinear DeviceArena::upload_linear(std::initializer_list<const cpu::Linear*> parts) {
  DeviceLinear l;
  l.in = (*parts.begin())->in;
  bool bias = false;
  for (const cpu::Linear* p : parts) {
    check<ShapeError>(p->in == l.in, "engine: fused linear parts take ", p->in, " and ", l.in,
                      " inputs");
    l.out += p->out;
    bias = bias || !p->bias.empty();
  }
  std::vector<float> w, b;
  w.reserve(static_cast<size_t>(l.out * l.in));
  for (const cpu::Linear* p : parts) {
    w.insert(w.end(), p->w.begin(), p->w.end());
    if (p->bias.empty())
      b.insert(b.end(), static_cast<size_t>(p->out), 0.0f);
    else
      b.insert(b.end(), p->bias.begin(), p->bias.end());
  }
  l.w = upload_bf16(w);
  if (bias) l.bias = upload_f32(b);
  return l;
}

}  // namespace replayssm::engine::cuda
