// Causal depthwise conv1d decode step + SiLU with a per-slot rolling state, and the column copies
// that ride along in the same launch (kernels.h ConvStep). One thread per (row, channel).
#include "cuda/kernels.h"
#include "cuda/launch_check.h"
#include "cuda/reduce.cuh"

namespace replayssm::engine::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxTaps = 8;

__device__ __forceinline__ float softplus(float v) { return v > 20.0f ? v : log1pf(expf(v)); }

__global__ void conv_step_kernel(ConvStep p, int64_t B) {
  const int64_t width = p.C + p.pass_n;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= B * width) return;
  const int64_t b = idx / width, c = idx % width;
  const float* row = p.in + b * p.ld_in;
  if (c >= p.C) {  // a copied column
    const int64_t j = c - p.C;
    float v = row[p.pass_off + j];
    if (p.dt_process) {
      v = fmaxf(softplus(v + p.dt_bias[j]), p.dt_lo);
      if (p.dt_hi > 0.0f) v = fminf(v, p.dt_hi);
    }
    if (j < p.pass_split)
      p.pass_out[0][b * p.pass_split + j] = v;
    else
      p.pass_out[1][b * (p.pass_n - p.pass_split) + (j - p.pass_split)] = v;
    return;
  }
  const int32_t slot = p.slots[b];
  if (slot < 0 || slot >= p.num_slots) return;
  float* st = p.state + (static_cast<int64_t>(slot) * p.C + c) * p.k;
  const float* w = p.w + c * p.k;
  float s[kMaxTaps];
#pragma unroll
  for (int j = 0; j < kMaxTaps; ++j)
    if (j + 1 < p.k) s[j] = st[j + 1];
  float acc = p.bias ? p.bias[c] : 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxTaps; ++j) {
    if (j >= p.k) break;
    const float v = j + 1 < p.k ? s[j] : row[p.in_off + c];
    st[j] = v;
    acc += v * w[j];
  }
  const float y = silu(acc);
  int r = 0;
  while (r < 2 && c >= p.out_begin[r + 1]) ++r;
  const int64_t len = p.out_begin[r + 1] - p.out_begin[r];
  p.out[r][b * len + (c - p.out_begin[r])] = y;
}

}  // namespace

void conv_step(const ConvStep& p, int64_t B, cudaStream_t s) {
  const int64_t n = B * (p.C + p.pass_n);
  if (n == 0) return;
  conv_step_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, s>>>(p, B);
  check_launch("engine conv_step");
}

}  // namespace replayssm::engine::cuda
