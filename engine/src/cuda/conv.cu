// Causal depthwise conv1d decode step + SiLU with a per-slot rolling state, and the column copies
// that ride along in the same launch (kernels.h ConvStep), over the T tokens of a verify step;
// the rollback of a verify step's rejected tokens. One thread per (row, channel).
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
  const int32_t slot = p.slots[b];
  const bool real = slot >= 0 && slot < p.num_slots;
  const int fed = !real ? 0 : p.ntok ? p.ntok[b] : p.T;
  if (c >= p.C) {  // a copied column
    const int64_t j = c - p.C;
    for (int t = 0; t < p.T; ++t) {
      const int64_t r = b * p.T + t;
      float v = 0.0f;
      if (t < fed) {
        v = p.in[r * p.ld_in + p.pass_off + j];
        if (p.dt_process) {
          v = fmaxf(softplus(v + p.dt_bias[j]), p.dt_lo);
          if (p.dt_hi > 0.0f) v = fminf(v, p.dt_hi);
        }
      }
      if (j < p.pass_split)
        p.pass_out[0][r * p.pass_split + j] = v;
      else
        p.pass_out[1][r * (p.pass_n - p.pass_split) + (j - p.pass_split)] = v;
    }
    return;
  }
  int r_out = 0;
  while (r_out < 2 && c >= p.out_begin[r_out + 1]) ++r_out;
  const int64_t len = p.out_begin[r_out + 1] - p.out_begin[r_out];
  float* out = p.out[r_out] + (c - p.out_begin[r_out]);
  float* st = real ? p.state + (static_cast<int64_t>(slot) * p.C + c) * p.k : nullptr;
  const float* w = p.w + c * p.k;
  float s[kMaxTaps];  // the window, oldest first; s[k - 1] is the newest input
#pragma unroll
  for (int j = 0; j < kMaxTaps; ++j) s[j] = j < p.k && real ? st[j] : 0.0f;
  if (p.saved && real) {
    float* sv = p.saved + (b * p.C + c) * p.k;
#pragma unroll
    for (int j = 0; j < kMaxTaps; ++j)
      if (j < p.k) sv[j] = s[j];
  }
  for (int t = 0; t < p.T; ++t) {
    const int64_t r = b * p.T + t;
    if (t >= fed) {
      out[r * len] = 0.0f;
      continue;
    }
    const float x = p.in[r * p.ld_in + p.in_off + c];
    if (p.kept) p.kept[r * p.C + c] = x;
    float acc = p.bias ? p.bias[c] : 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxTaps; ++j) {
      if (j >= p.k) break;
      s[j] = j + 1 < p.k ? s[j + 1] : x;
      acc += s[j] * w[j];
    }
    out[r * len] = silu(acc);
  }
  if (fed > 0) {
#pragma unroll
    for (int j = 0; j < kMaxTaps; ++j)
      if (j < p.k) st[j] = s[j];
  }
}

__global__ void conv_rollback_kernel(ConvRollback p, int64_t B) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= B * p.C) return;
  const int64_t b = idx / p.C, c = idx % p.C;
  const int32_t slot = p.slots[b];
  if (slot < 0 || slot >= p.num_slots) return;
  const int32_t n = p.accepted[b];
  if (n < 0 || n >= p.ntok[b]) return;  // every fed token kept: the state is already right
  float* st = p.state + (static_cast<int64_t>(slot) * p.C + c) * p.k;
  // The inputs in order are saved[0..k-1], kept[0..ntok-1]; after n tokens the window is
  // elements n .. n + k - 1 of that sequence.
  for (int j = 0; j < p.k; ++j) {
    const int i = n + j;
    st[j] = i < p.k ? p.saved[(b * p.C + c) * p.k + i] : p.kept[(b * p.T + i - p.k) * p.C + c];
  }
}

}  // namespace

void conv_step(const ConvStep& p, int64_t B, cudaStream_t s) {
  const int64_t n = B * (p.C + p.pass_n);
  if (n == 0) return;
  conv_step_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, s>>>(p, B);
  check_launch("engine conv_step");
}

void conv_rollback(const ConvRollback& p, int64_t B, cudaStream_t s) {
  const int64_t n = B * p.C;
  if (n == 0) return;
  conv_rollback_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      p, B);
  check_launch("engine conv_rollback");
}

}  // namespace replayssm::engine::cuda
