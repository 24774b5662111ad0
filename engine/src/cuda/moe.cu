// Kernels of the CUDA MoE block (moe_kernels.h): per-row routing (top-k on the device, the same
// rules as route_token), expert activations, the weighted combine and a bf16 conversion.
#include <cfloat>
#include <climits>
#include <cmath>

#include "cuda/launch_check.h"
#include "cuda/moe_kernels.h"
#include "cuda/reduce.cuh"

namespace replayssm::engine::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

/// (v, i) beats (bv, bi): larger value, ties to the lower index; bi < 0 is "none yet".
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  return bi < 0 || v > bv || (v == bv && i < bi);
}

/// Warp-wide argmax of (v, i) pairs with the rule above; every lane gets the winner.
__device__ __forceinline__ void warp_argmax(float& v, int& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (oi >= 0 && better(ov, oi, v, i)) v = ov, i = oi;
  }
}

/// One warp per row. Shared memory: score[E], choice[E], group[n_group] floats, sel[k] ints,
/// taken[E], keep[n_group] bytes.
__global__ void moe_route_kernel(MoeRoute p) {
  extern __shared__ float sm[];
  const int E = p.E, K = p.k, G = p.n_group;
  float* score = sm;
  float* choice = score + E;
  float* group = choice + E;
  int* sel = reinterpret_cast<int*>(group + G);
  unsigned char* taken = reinterpret_cast<unsigned char*>(sel + K);
  unsigned char* keep = taken + E;
  const int64_t row = blockIdx.x;
  const int lane = threadIdx.x;
  const float* l = p.logits + row * p.ld_logits;

  if (p.sigmoid_router) {
    for (int e = lane; e < E; e += 32) {
      const float s = sigmoid(l[e]);
      score[e] = s;
      choice[e] = s + (p.correction_bias ? p.correction_bias[e] : 0.0f);
      taken[e] = 0;
    }
  } else {  // softmax in fp32 (sum in double, as route_token)
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    double z = 0.0;
    for (int e = lane; e < E; e += 32) {
      const float x = expf(l[e] - mx);
      score[e] = x;
      z += x;
      taken[e] = 0;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);
    for (int e = lane; e < E; e += 32) {
      score[e] = static_cast<float>(score[e] / z);
      choice[e] = score[e];
    }
  }
  __syncwarp();

  if (p.sigmoid_router && G > 1 && lane == 0) {
    // Keep the topk_group groups whose two best choices sum highest (ties: lower group first).
    const int per = E / G;
    for (int g = 0; g < G; ++g) {
      const float* v = choice + g * per;
      int i1 = 0;
      for (int i = 1; i < per; ++i)
        if (v[i] > v[i1]) i1 = i;
      float sum = 0.0f + v[i1];
      if (per >= 2) {
        int i2 = -1;
        for (int i = 0; i < per; ++i)
          if (i != i1 && (i2 < 0 || v[i] > v[i2])) i2 = i;
        sum += v[i2];
      }
      group[g] = sum;
      keep[g] = 0;
    }
    for (int r = 0; r < p.topk_group; ++r) {
      int best = -1;
      for (int g = 0; g < G; ++g)
        if (!keep[g] && (best < 0 || group[g] > group[best])) best = g;
      keep[best] = 1;
    }
    for (int g = 0; g < G; ++g)
      if (!keep[g])
        for (int i = 0; i < per; ++i) choice[g * per + i] = -INFINITY;
  }
  __syncwarp();

  // Top-k of the choices: k rounds of a warp argmax over the experts not taken yet.
  for (int j = 0; j < K; ++j) {
    float bv = 0.0f;
    int bi = -1;
    for (int e = lane; e < E; e += 32)
      if (!taken[e] && better(choice[e], e, bv, bi)) bv = choice[e], bi = e;
    warp_argmax(bv, bi);
    if (lane == 0) {
      taken[bi] = 1;
      sel[j] = bi;
    }
    __syncwarp();
  }

  if (lane == 0) {
    double sum = 0.0;
    for (int j = 0; j < K; ++j) sum += score[sel[j]];
    for (int j = 0; j < K; ++j) {
      const float s = score[sel[j]];
      float w;
      if (p.sigmoid_router) {
        double d = s;
        if (p.norm_topk_prob) d /= sum + 1e-20;
        w = static_cast<float>(d * p.scaling);
      } else {
        w = static_cast<float>(p.norm_topk_prob ? s / sum : double(s));
      }
      p.weight[row * K + j] = w;
    }
  }
  __syncwarp();
  for (int j = lane; j < K; j += 32) {
    const int64_t pair = row * K + j;
    const int64_t e = sel[j];
    p.expert[pair] = static_cast<int32_t>(e);
    if (p.a_up) {
      p.a_up[pair] = p.w_up + e * p.up_out * p.width;
      p.b_up[pair] = p.xin + row * p.width;
      p.c_up[pair] = p.h + pair * p.up_out;
      p.a_down[pair] = p.w_down + e * p.width * p.I;
      p.b_down[pair] = p.act + pair * p.I;
      p.c_down[pair] = p.y + pair * p.width;
    }
  }
}

__global__ void moe_activation_kernel(const float* __restrict__ in, int64_t P, int64_t I,
                                      bool gated, const float* __restrict__ bias,
                                      const int32_t* __restrict__ expert,
                                      const float* __restrict__ scale, int64_t ld_scale,
                                      bf16* __restrict__ out) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= P * I) return;
  const int64_t p = idx / I, i = idx % I;
  const int64_t w = gated ? 2 * I : I;
  const float* row = in + p * w;
  const float* b = bias ? bias + static_cast<int64_t>(expert[p]) * w : nullptr;
  float v;
  if (gated) {
    const float g = row[i] + (b ? b[i] : 0.0f);
    const float u = row[I + i] + (b ? b[I + i] : 0.0f);
    v = silu(g) * u;
  } else {
    const float u = row[i] + (b ? b[i] : 0.0f);
    v = u > 0.0f ? u * u : 0.0f;
  }
  if (scale) v *= sigmoid(scale[p * ld_scale]);
  out[idx] = __float2bfloat16_rn(v);
}

__global__ void moe_combine_kernel(const float* __restrict__ y, const int32_t* __restrict__ expert,
                                   const float* __restrict__ weight,
                                   const float* __restrict__ bias, int k, int64_t width,
                                   float* residual, bf16* __restrict__ out) {
  const int64_t row = blockIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= width) return;
  float acc = 0.0f;
  for (int j = 0; j < k; ++j) {
    const int64_t pair = row * k + j;
    float v = y[pair * width + i];
    if (bias) v += bias[static_cast<int64_t>(expert[pair]) * width + i];
    acc += weight[pair] * v;
  }
  if (residual)
    residual[row * width + i] += acc;
  else
    out[row * width + i] = __float2bfloat16_rn(acc);
}

__global__ void to_bf16_kernel(const float* __restrict__ in, int64_t n, bf16* __restrict__ out) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx < n) out[idx] = __float2bfloat16_rn(in[idx]);
}

}  // namespace

void moe_route(const MoeRoute& p, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  const size_t shared = (2 * size_t(p.E) + size_t(p.n_group)) * sizeof(float) +
                        size_t(p.k) * sizeof(int) + size_t(p.E) + size_t(p.n_group);
  moe_route_kernel<<<static_cast<unsigned>(n), 32, shared, s>>>(p);
  check_launch("engine moe_route");
}

void moe_activation(const float* in, int64_t P, int64_t I, bool gated, const float* bias,
                    const int32_t* expert, const float* scale, int64_t ld_scale, bf16* out,
                    cudaStream_t s) {
  if (P * I == 0) return;
  moe_activation_kernel<<<blocks_for(P * I), kThreads, 0, s>>>(in, P, I, gated, bias, expert,
                                                                scale, ld_scale, out);
  check_launch("engine moe_activation");
}

void moe_combine(const float* y, const int32_t* expert, const float* weight, const float* bias,
                 int64_t n, int k, int64_t width, float* residual, bf16* out_bf16,
                 cudaStream_t s) {
  if (n * width == 0) return;
  moe_combine_kernel<<<dim3(blocks_for(width), static_cast<unsigned>(n)), kThreads, 0, s>>>(
      y, expert, weight, bias, k, width, residual, out_bf16);
  check_launch("engine moe_combine");
}

void to_bf16(const float* in, int64_t n, bf16* out, cudaStream_t s) {
  if (n == 0) return;
  to_bf16_kernel<<<blocks_for(n), kThreads, 0, s>>>(in, n, out);
  check_launch("engine to_bf16");
}

}  // namespace replayssm::engine::cuda
