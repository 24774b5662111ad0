// round_slots (state_emulation.h): one block per (head, batch row) rounds one (slot, head) state
// through a format with the codecs' shared per-element math.
#include <cstdint>

#include "common/codec_math.h"
#include "cuda/launch_check.h"
#include "cuda/state_emulation.h"

namespace replayssm::engine::cuda {
namespace {

namespace codec = ::replayssm::codec;
constexpr int kThreads = 256;

__device__ float bf16_round(float x) {  // nearest even, NaN kept quiet (common/dtype.h f32_to_bf16)
  uint32_t u = codec::f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return codec::f32_from_bits((u | 0x400000u) & 0xffff0000u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return codec::f32_from_bits(u & 0xffff0000u);
}

__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__global__ void __launch_bounds__(kThreads) round_slots_kernel(const SlotRounding p) {
  const int32_t s = p.slot_ids[blockIdx.y];
  if (s < 0 || s >= p.num_slots || (p.only_flush && p.only_flush[s] == 0)) return;
  const int64_t h = blockIdx.x, m = p.rows * p.n;
  const int64_t base = (static_cast<int64_t>(s) * p.heads + h) * m;
  const float* x = p.src + base;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  auto put = [&](int64_t i, float v) {
    if (p.dst) p.dst[base + i] = v;
    if (p.dst16) p.dst16[base + i] = codec::f16_rne(v);
  };
  switch (p.format) {
    case StateFormat::kFp32:
      for (int64_t i = tid; i < m; i += kThreads) put(i, x[i]);
      return;
    case StateFormat::kBf16:
      for (int64_t i = tid; i < m; i += kThreads) put(i, bf16_round(x[i]));
      return;
    case StateFormat::kFp16:
      for (int64_t i = tid; i < m; i += kThreads) put(i, codec::f16_decode(codec::f16_rne(x[i])));
      return;
    case StateFormat::kFp16Sr: {
      // The slot's state is one SR row: element (h, i) has index e = h * m + i, four per Philox
      // block (m % 4 == 0, so a block never straddles heads).
      const uint64_t seed = static_cast<uint64_t>(p.sr_seeds[s]);
      const uint32_t step = static_cast<uint32_t>(p.sr_steps[s]);
      for (int64_t i = 4 * static_cast<int64_t>(tid); i < m; i += 4 * kThreads) {
        const uint64_t e = static_cast<uint64_t>(h * m + i);
        const codec::Philox4 w = codec::sr_block(seed, static_cast<uint32_t>(s), step, e >> 2);
        for (int j = 0; j < 4; ++j)
          put(i + j, codec::f16_decode(codec::f16_sr(x[i + j], codec::philox_word(w, j))));
      }
      return;
    }
    case StateFormat::kFp8:  // one warp per row: amax, scale, codes
      for (int64_t r = warp; r < p.rows; r += kThreads / 32) {
        const float* xr = x + r * p.n;
        float amax = 0.0f;
        for (int64_t j = lane; j < p.n; j += 32) amax = codec::amax_step(amax, xr[j]);
        const float scale = codec::fp8_row_scale(warp_max(amax));
        for (int64_t j = lane; j < p.n; j += 32)
          put(r * p.n + j, codec::fp8_decode(codec::fp8_encode(xr[j], scale), scale));
      }
      return;
    case StateFormat::kNvfp4: {  // the group's amax, then one 16-element block per thread
      __shared__ float part[kThreads / 32];
      float amax = 0.0f;
      for (int64_t i = tid; i < m; i += kThreads) amax = codec::amax_step(amax, x[i]);
      amax = warp_max(amax);
      if (lane == 0) part[warp] = amax;
      __syncthreads();
      amax = 0.0f;
      for (int w = 0; w < kThreads / 32; ++w) amax = fmaxf(amax, part[w]);
      const float s2 = codec::nvfp4_global_scale(amax);
      for (int64_t blk = tid; blk < m / 16; blk += kThreads) {
        float v[16];
        uint8_t codes[8];
        for (int i = 0; i < 16; ++i) v[i] = x[blk * 16 + i];
        const float sb = codec::nvfp4_block_scale(codec::nvfp4_encode_block(v, s2, codes), s2);
        for (int i = 0; i < 16; ++i)
          put(blk * 16 + i, codec::nvfp4_decode(static_cast<uint8_t>(codes[i / 2] >> (4 * (i & 1))), sb));
      }
      return;
    }
  }
}

__global__ void sr_advance_kernel(const int32_t* slot_ids, int64_t batch, int32_t num_slots,
                                  const int8_t* only_flush, int32_t* steps) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const int32_t s = slot_ids[b];
  if (s < 0 || s >= num_slots || (only_flush && only_flush[s] == 0)) return;
  steps[s] = static_cast<int32_t>(static_cast<uint32_t>(steps[s]) + 1u);
}

}  // namespace

void round_slots(const SlotRounding& p, cudaStream_t s) {
  if (p.batch == 0 || p.heads == 0) return;
  round_slots_kernel<<<dim3(static_cast<unsigned>(p.heads), static_cast<unsigned>(p.batch)),
                       kThreads, 0, s>>>(p);
  check_launch("engine round_slots");
  if (p.format != StateFormat::kFp16Sr) return;
  sr_advance_kernel<<<static_cast<unsigned>((p.batch + 255) / 256), 256, 0, s>>>(
      p.slot_ids, p.batch, p.num_slots, p.only_flush, p.sr_steps);
  check_launch("engine round_slots (SR steps)");
}

}  // namespace replayssm::engine::cuda
