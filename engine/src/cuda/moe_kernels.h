// Kernels of the CUDA MoE block (moe_mixer.cpp; CPU twin: model/moe.cpp). Every launcher enqueues
// on `s` and never synchronises, so the block stays capturable into the step's CUDA graph.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels.h"

namespace replayssm::engine::cuda {

/// The router of each row, on the device, as route_token (model/moe.h): from the router logits
/// the top-k experts (ties: lower index first) and their weights —
///   sigmoid router (Nemotron-H): score = sigmoid(logit), choice = score + correction_bias; with
///     n_group > 1 only the topk_group groups whose two best choices sum highest stay eligible;
///     weight = score (/ sum of the chosen scores when norm) * scaling;
///   softmax router (Qwen): score = softmax(logits) in fp32, weight = score (/ sum when norm).
/// It also fills the device pointer arrays of the two batched expert GEMMs, one entry per
/// (row, choice) pair p = row * k + j with expert e:
///   up:   A = w_up + e * up_out * width, B = xin + row * width, C = h + p * up_out
///   down: A = w_down + e * width * I,    B = act + p * I,       C = y + p * width
struct MoeRoute {
  const float* logits = nullptr;  ///< [n, ld_logits], router logits in columns 0..E-1
  int64_t ld_logits = 0;
  const float* correction_bias = nullptr;  ///< [E] or nullptr
  int E = 0, k = 0, n_group = 1, topk_group = 1;
  bool sigmoid_router = false, norm_topk_prob = true;
  double scaling = 1.0;
  int32_t* expert = nullptr;  ///< [n, k] out
  float* weight = nullptr;    ///< [n, k] out
  const bf16* w_up = nullptr;
  const bf16* xin = nullptr;
  float* h = nullptr;
  const bf16* w_down = nullptr;
  const bf16* act = nullptr;
  float* y = nullptr;
  int64_t up_out = 0, width = 0, I = 0;
  const void** a_up = nullptr;
  const void** b_up = nullptr;
  void** c_up = nullptr;
  const void** a_down = nullptr;
  const void** b_down = nullptr;
  void** c_down = nullptr;
};
void moe_route(const MoeRoute& p, int64_t n, cudaStream_t s);
/// Largest expert count moe_route runs (its per-row arrays live in shared memory).
constexpr int kMoeMaxExperts = 4096;

/// Expert activation into bf16 out [P, I] of in [P, I] (relu2) or [P, 2I] = [gate | up] (SwiGLU),
/// after adding bias[expert[p]] (rows of in's width) when bias is given, and times
/// sigmoid(scale[p * ld_scale]) when scale is given (Qwen's shared_expert_gate).
void moe_activation(const float* in, int64_t P, int64_t I, bool gated, const float* bias,
                    const int32_t* expert, const float* scale, int64_t ld_scale, bf16* out,
                    cudaStream_t s);

/// The weighted sum of each row's k expert outputs y [n * k, width] (+ bias[expert], [E, width],
/// when given), in fp32 in choice order: residual [n, width] += it, or, with residual null,
/// out_bf16 [n, width] = it (the LatentMoE fc2_latent_proj input).
void moe_combine(const float* y, const int32_t* expert, const float* weight, const float* bias,
                 int64_t n, int k, int64_t width, float* residual, bf16* out_bf16, cudaStream_t s);

/// out [n] bf16 = in [n] fp32 (round to nearest even).
void to_bf16(const float* in, int64_t n, bf16* out, cudaStream_t s);

}  // namespace replayssm::engine::cuda
