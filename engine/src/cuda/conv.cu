// Causal depthwise conv1d decode step + SiLU with a per-slot rolling state, and the column copies
// that ride along in the same launch (kernels.h ConvStep), over the T tokens of a verify step;
// the rollback of a verify step's rejected tokens. One thread per (row, channel): grid (channel
// blocks, rows), so no thread divides by the row width; a 4-tap window (every published model)
// moves as one 16-byte load and store, as do its weights.
#include <algorithm>
#include <cstdint>

#include "cuda/kernels.h"
#include "cuda/launch_check.h"
#include "cuda/reduce.cuh"

namespace replayssm::engine::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;
constexpr int kMaxTaps = 8;

__device__ __forceinline__ float softplus(float v) { return v > 20.0f ? v : log1pf(expf(v)); }

/// Loads (or stores) the k-tap window or weights at p: one float4 when K4 (k = 4, 16-byte aligned).
template <bool K4>
__device__ __forceinline__ void load_taps(const float* p, int k, float* s) {
  if constexpr (K4) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    s[0] = v.x, s[1] = v.y, s[2] = v.z, s[3] = v.w;
  } else {
#pragma unroll
    for (int j = 0; j < kMaxTaps; ++j)
      if (j < k) s[j] = p[j];
  }
}
template <bool K4>
__device__ __forceinline__ void store_taps(float* p, int k, const float* s) {
  if constexpr (K4) {
    *reinterpret_cast<float4*>(p) = make_float4(s[0], s[1], s[2], s[3]);
  } else {
#pragma unroll
    for (int j = 0; j < kMaxTaps; ++j)
      if (j < k) p[j] = s[j];
  }
}

/// grid (ceil((C + pass_n) / kThreads), rows from b0).
template <bool K4>
__global__ void conv_step_kernel(ConvStep p, int64_t b0) {
  const int64_t width = p.C + p.pass_n;
  const int64_t b = b0 + blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= width) return;
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
  const int k = K4 ? 4 : p.k;
  float* st = real ? p.state + (static_cast<int64_t>(slot) * p.C + c) * k : nullptr;
  float w[kMaxTaps];
  load_taps<K4>(p.w + c * k, k, w);
  float s[kMaxTaps] = {};  // the window, oldest first; s[k - 1] is the newest input (pad rows: 0)
  if (real) load_taps<K4>(st, k, s);
  if (p.saved && real) store_taps<K4>(p.saved + (b * p.C + c) * k, k, s);
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
      if (j >= k) break;
      s[j] = j + 1 < k ? s[j + 1] : x;
      acc += s[j] * w[j];
    }
    out[r * len] = silu(acc);
  }
  if (fed > 0) store_taps<K4>(st, k, s);
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
  const int64_t width = p.C + p.pass_n;
  if (B * width == 0) return;
  // The 16-byte window path: 4 taps and 16-byte aligned state, weights and saved windows.
  const auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  const bool k4 = p.k == 4 && aligned(p.state) && aligned(p.w) && (!p.saved || aligned(p.saved));
  for (int64_t b0 = 0; b0 < B; b0 += kMaxGridY) {  // rows in grid.y, at most 65535 a launch
    const dim3 grid(static_cast<unsigned>((width + kThreads - 1) / kThreads),
                    static_cast<unsigned>(std::min(B - b0, kMaxGridY)));
    if (k4)
      conv_step_kernel<true><<<grid, kThreads, 0, s>>>(p, b0);
    else
      conv_step_kernel<false><<<grid, kThreads, 0, s>>>(p, b0);
  }
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
