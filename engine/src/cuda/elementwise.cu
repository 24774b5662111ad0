// Element-wise kernels of the CUDA engine (kernels.h): embedding gather, MLP activations, bias
// add, per-slot position counters and slot-row zeroing.
#include <algorithm>
#include <cstdint>

#include "cuda/bf16_store.cuh"
#include "cuda/kernels.h"
#include "cuda/launch_check.h"
#include "cuda/reduce.cuh"

namespace replayssm::engine::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

__global__ void embed_kernel(const bf16* __restrict__ table, const int32_t* __restrict__ tokens,
                             int64_t H, int64_t V, float* __restrict__ out) {
  const int64_t b = blockIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= H) return;
  const int32_t t = tokens[b];
  out[b * H + i] = t >= 0 && t < V ? __bfloat162float(table[t * H + i]) : 0.0f;
}

/// grid (ceil(I / (VEC * kThreads)), rows from b0): VEC consecutive outputs of row b per thread (VEC = 4:
/// 16-byte loads and an 8-byte store; I % 4 == 0 and 16-byte aligned rows).
template <int VEC>
__global__ void mlp_activation_kernel(const float* __restrict__ in, int64_t I, bool gated,
                                      bf16* __restrict__ out, int64_t b0) {
  const int64_t b = b0 + blockIdx.y;
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
  if (i >= I) return;
  float u[VEC], g[VEC], v[VEC];
  const float* row = in + b * (gated ? 2 * I : I) + i;
  if constexpr (VEC == 4) {
    const float4 a = *reinterpret_cast<const float4*>(row);
    u[0] = a.x, u[1] = a.y, u[2] = a.z, u[3] = a.w;
    if (gated) {
      const float4 c = *reinterpret_cast<const float4*>(row + I);
      g[0] = c.x, g[1] = c.y, g[2] = c.z, g[3] = c.w;
    }
  } else {
    u[0] = row[0];
    if (gated) g[0] = row[I];
  }
#pragma unroll
  for (int e = 0; e < VEC; ++e)
    v[e] = gated ? silu(u[e]) * g[e] : (u[e] > 0.0f ? u[e] * u[e] : 0.0f);
  bf16* o = out + b * I + i;
  if constexpr (VEC == 4) {
    store4_bf16(o, v);
  } else {
    o[0] = __float2bfloat16_rn(v[0]);
  }
}

__global__ void add_bias_kernel(float* y, int64_t ldy, const float* __restrict__ bias, int64_t B,
                                int64_t n) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= B * n) return;
  y[(idx / n) * ldy + idx % n] += bias[idx % n];
}

__global__ void advance_positions_kernel(int32_t* positions, const int32_t* __restrict__ slots,
                                         const int32_t* __restrict__ counts, int64_t B,
                                         int32_t num_slots) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= B) return;
  const int32_t s = slots[b];
  if (s >= 0 && s < num_slots) positions[s] += counts ? counts[b] : 1;
}

__global__ void zero_slot_rows_kernel(uint32_t* base, int64_t row_words,
                                      const int32_t* __restrict__ slots, int32_t num_slots) {
  const int32_t s = slots[blockIdx.y];
  if (s < 0 || s >= num_slots) return;
  uint32_t* row = base + static_cast<int64_t>(s) * row_words;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < row_words;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    row[i] = 0u;
}

}  // namespace

void embed(const bf16* table, const int32_t* tokens, int64_t B, int64_t H, int64_t V, float* out,
           cudaStream_t s) {
  if (B == 0) return;
  embed_kernel<<<dim3(blocks_for(H), static_cast<unsigned>(B)), kThreads, 0, s>>>(table, tokens,
                                                                                   H, V, out);
  check_launch("engine embed");
}

void mlp_activation(const float* in, int64_t B, int64_t I, bool gated, bf16* out,
                    cudaStream_t s) {
  if (B * I == 0) return;
  const bool vec4 = I % 4 == 0 && reinterpret_cast<uintptr_t>(in) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(out) % 8 == 0;
  for (int64_t b0 = 0; b0 < B; b0 += kMaxGridY) {  // rows in grid.y, at most 65535 a launch
    const unsigned rows = static_cast<unsigned>(std::min(B - b0, kMaxGridY));
    if (vec4)
      mlp_activation_kernel<4><<<dim3(blocks_for(I / 4), rows), kThreads, 0, s>>>(in, I, gated,
                                                                                 out, b0);
    else
      mlp_activation_kernel<1><<<dim3(blocks_for(I), rows), kThreads, 0, s>>>(in, I, gated, out,
                                                                              b0);
  }
  check_launch("engine mlp_activation");
}

void add_bias(float* y, int64_t ldy, const float* bias, int64_t B, int64_t n, cudaStream_t s) {
  if (B * n == 0) return;
  add_bias_kernel<<<blocks_for(B * n), kThreads, 0, s>>>(y, ldy, bias, B, n);
  check_launch("engine add_bias");
}

void advance_positions(int32_t* positions, const int32_t* slots, const int32_t* counts, int64_t B,
                       int32_t num_slots, cudaStream_t s) {
  if (B == 0) return;
  advance_positions_kernel<<<blocks_for(B), kThreads, 0, s>>>(positions, slots, counts, B,
                                                              num_slots);
  check_launch("engine advance_positions");
}

void zero_slot_rows(void* base, int64_t row_bytes, const int32_t* slots, int64_t n,
                    int32_t num_slots, cudaStream_t s) {
  if (n == 0 || row_bytes == 0) return;
  const int64_t words = row_bytes / 4;
  const unsigned x = static_cast<unsigned>(std::min<int64_t>((words + kThreads - 1) / kThreads, 1024));
  zero_slot_rows_kernel<<<dim3(x, static_cast<unsigned>(n)), kThreads, 0, s>>>(
      static_cast<uint32_t*>(base), words, slots, num_slots);
  check_launch("engine zero_slot_rows");
}

}  // namespace replayssm::engine::cuda
