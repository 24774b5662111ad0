// The CUDA engine's decode attention (engine/src/cuda/attention.cu) against an fp64 softmax
// attention on the host: GQA groups of 1..16 query heads (a group split over blocks included),
// head_dim 16..256 (the tensor-core kernel at 64, 128, 256, the CUDA-core split kernel at other
// multiples of 32 and under RSSM_ATTENTION_PLAN="mma=0", the per-head kernel otherwise), output
// gates, per-row positions from 0 to the end of the cache, pad rows (exact zeros), one chunk and
// several (the combine kernel), NaN-poisoned outputs and a guard after them; and verify steps'
// row groups (Attention::tokens_per_row: T tokens of one slot at consecutive positions, some
// unused, queries of a group served together).
//
// Tolerance: K, V are bf16 in both; the kernels accumulate in fp32 (scores, exponentials, P·V over
// up to 2048 positions: ~1e-6 relative; the tensor-core kernel's q and P as bf16 hi + lo pairs,
// ~2^-16) and round the output to bf16 (up to 2^-8 relative), so
// |out - ref| <= 2^-8 |ref| + 1e-5 (a wrong position, head, scale or merge moves outputs by O(1)).
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "cuda/device.h"
#include "cuda/kernels.h"
#include "replayssm/errors.h"

namespace replayssm::engine::cuda {
namespace {

template <class T>
struct Dev {
  T* p = nullptr;
  explicit Dev(size_t n, const T* host = nullptr) : n(n) {
    EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
    if (host) {
      EXPECT_EQ(cudaMemcpy(p, host, n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~Dev() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  size_t n;
};

struct Case {
  int nh, nkv, hd;
  bool gate;
};

void run_case(const Case& c, int splits_override, int TT = 1, int32_t ctx = 300) {
  SCOPED_TRACE("nh " + std::to_string(c.nh) + " nkv " + std::to_string(c.nkv) + " hd " +
               std::to_string(c.hd) + " gate " + std::to_string(c.gate) + " splits " +
               std::to_string(splits_override) + " tokens per row " + std::to_string(TT));
  std::mt19937 rng(c.nh * 1000 + c.hd + splits_override + 100 * TT);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int32_t pool = 9;
  const std::vector<int32_t> group_slots{7, -1, 0, 4, 2, 8};  // group 1 a pad row (group)
  std::vector<int32_t> positions(pool);
  for (int32_t& p : positions) p = static_cast<int32_t>(rng() % ctx);
  positions[7] = 0;
  positions[0] = ctx - 1;
  positions[2] = 31;  // ends on a tile edge (32 positions: two tensor-core tiles)
  // Rows: TT per group, token t of group g at positions[slot] - (TT - 1) + t (within the cache);
  // group g uses its first 1 + (g % TT) tokens, the others are unused rows (slot -1).
  std::vector<int32_t> slots, row_pos;
  for (size_t g = 0; g < group_slots.size(); ++g) {
    const int32_t s = group_slots[g];
    const int32_t base = s < 0 ? 0 : std::max(0, positions[s] - (TT - 1));
    for (int t = 0; t < TT; ++t) {
      const bool used = s >= 0 && t <= int(g % TT);
      slots.push_back(used ? s : -1);
      row_pos.push_back(used ? base + t : 0);
    }
  }
  const int64_t B = static_cast<int64_t>(slots.size());
  const int64_t cache_n = int64_t{pool} * ctx * c.nkv * c.hd;
  std::vector<uint16_t> kc(cache_n), vc(cache_n);
  for (auto& x : kc) x = f32_to_bf16(u(rng));
  for (auto& x : vc) x = f32_to_bf16(u(rng));
  const int64_t ld = int64_t{c.nh} * 2 * c.hd;
  std::vector<float> q(B * c.nh * c.hd), proj(B * ld);
  for (auto& x : q) x = 2.0f * u(rng);
  for (auto& x : proj) x = 3.0f * u(rng);

  Dev<bf16> dk(cache_n, reinterpret_cast<const bf16*>(kc.data()));
  Dev<bf16> dv(cache_n, reinterpret_cast<const bf16*>(vc.data()));
  Dev<float> dq(q.size(), q.data()), dproj(proj.size(), proj.data());
  Dev<int32_t> dslots(slots.size(), slots.data()), dpos(positions.size(), positions.data());
  Dev<int32_t> drow_pos(row_pos.size(), row_pos.data());
  const int64_t out_n = B * c.nh * c.hd, guard = 64;
  std::vector<uint16_t> poison(out_n + guard, 0x7FC1);  // bf16 NaN
  Dev<bf16> dout(poison.size(), reinterpret_cast<const bf16*>(poison.data()));

  Attention at;
  at.proj = dproj.p;
  at.ld = ld;
  at.nh = c.nh;
  at.nkv = c.nkv;
  at.hd = c.hd;
  at.gate = c.gate;
  at.kcache = dk.p;
  at.vcache = dv.p;
  at.ctx = ctx;
  at.num_slots = pool;
  at.slots = dslots.p;
  at.positions = dpos.p;
  if (TT > 1) {
    at.row_pos = drow_pos.p;
    at.tokens_per_row = TT;
  }
  at.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
  at.q = dq.p;
  at.out = dout.p;
  at.splits = splits_override > 0 ? splits_override : attention_splits(at, B, 132);
  if (c.hd % 32 != 0) at.splits = 1;
  Dev<float> part_acc(std::max<int64_t>(1, B * at.splits * c.nh * c.hd));
  Dev<float> part_ml(std::max<int64_t>(1, B * at.splits * c.nh * 2));
  at.part_acc = part_acc.p;
  at.part_ml = part_ml.p;
  attention_decode(at, B, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<bf16> raw = dout.get();
  std::vector<uint16_t> out(raw.size());
  std::memcpy(out.data(), raw.data(), raw.size() * sizeof(uint16_t));

  const int G = c.nh / c.nkv;
  double worst = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int h = 0; h < c.nh; ++h) {
      const int64_t o = (b * c.nh + h) * c.hd;
      if (slots[b] < 0) {
        for (int d = 0; d < c.hd; ++d) ASSERT_EQ(out[o + d], 0u) << "pad row b " << b;
        continue;
      }
      const int32_t slot = slots[b], n = (TT > 1 ? row_pos[b] : positions[slot]) + 1, j = h / G;
      std::vector<double> s(n);
      double mx = -1e300;
      for (int t = 0; t < n; ++t) {
        double dot = 0;
        const int64_t row = ((int64_t{slot} * ctx + t) * c.nkv + j) * c.hd;
        for (int d = 0; d < c.hd; ++d) dot += double(q[o + d]) * bf16_to_f32(kc[row + d]);
        s[t] = dot * at.scale;
        mx = std::max(mx, s[t]);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int d = 0; d < c.hd; ++d) {
        double ref = 0;
        for (int t = 0; t < n; ++t)
          ref += s[t] * bf16_to_f32(vc[((int64_t{slot} * ctx + t) * c.nkv + j) * c.hd + d]);
        ref /= sum;
        if (c.gate) ref /= 1.0 + std::exp(-double(proj[b * ld + int64_t{h} * 2 * c.hd + c.hd + d]));
        const double got = bf16_to_f32(out[o + d]);
        ASSERT_TRUE(std::isfinite(got)) << "b " << b << " h " << h << " d " << d;
        ASSERT_LE(std::abs(got - ref), std::ldexp(std::abs(ref), -8) + 1e-5)
            << "b " << b << " h " << h << " d " << d << " got " << got << " ref " << ref;
        worst = std::max(worst, std::abs(got - ref));
      }
    }
  }
  for (int64_t i = out_n; i < out_n + guard; ++i) ASSERT_EQ(out[i], 0x7FC1u) << "guard " << i;
  std::printf("  nh %d nkv %d hd %d splits %d tokens per row %d: max |diff| %.2e\n", c.nh, c.nkv,
              c.hd, at.splits, TT, worst);
}

TEST(AttentionCuda, MatchesFp64SoftmaxAttention) {
  if (::replayssm::cuda::device_count() == 0) GTEST_SKIP() << ::replayssm::cuda::device_summary();
  const Case cases[] = {
      {40, 8, 128, false},  // Nemotron-3-Nano-4B
      {16, 4, 256, true},   // Qwen3.5-4B (gated)
      {32, 2, 128, false},  // Nemotron-3-Super: a group of 16 over two blocks
      {6, 2, 64, false},    // the bundled models
      {4, 4, 32, true},     // no sharing
      {3, 1, 96, true},     // odd lanes-per-row width
      {8, 4, 160, false},   // groups of 2 (2 heads per block), 5 dims per lane
      {4, 2, 192, true},    // groups of 2, 6 dims per lane
      {8, 2, 16, true},     // head_dim 16: the per-head kernel
  };
  for (const Case& c : cases)
    for (const int splits : {1, 0, 7}) run_case(c, splits);
}

TEST(AttentionCuda, VerifyRowGroupsMatchFp64SoftmaxAttention) {
  if (::replayssm::cuda::device_count() == 0) GTEST_SKIP() << ::replayssm::cuda::device_summary();
  const Case cases[] = {
      {40, 8, 128, false},  // Nemotron-3-Nano-4B: 4 tokens x 5 heads over 3 blocks of 8
      {16, 4, 256, true},   // Qwen3.5-4B (gated)
      {6, 2, 64, false},    // the bundled models
      {4, 4, 32, true},     // groups of one head
      {8, 2, 16, true},     // head_dim 16: the per-head kernel (rows one by one)
  };
  for (const Case& c : cases)
    for (const int TT : {2, 4, 8})
      for (const int splits : {1, 0, 7}) run_case(c, splits, TT);
}

// A long cache: each warp of the tensor-core kernel walks many tiles through its three stages.
TEST(AttentionCuda, LongContextMatchesFp64SoftmaxAttention) {
  if (::replayssm::cuda::device_count() == 0) GTEST_SKIP() << ::replayssm::cuda::device_summary();
  for (const Case& c : {Case{16, 4, 256, true}, Case{40, 8, 128, false}, Case{6, 2, 64, false}})
    for (const int splits : {1, 3}) run_case(c, splits, 1, 2048);
  run_case({16, 4, 256, true}, 0, 4, 2048);
}

// The tensor-core kernel's other block shapes (RSSM_ATTENTION_PLAN warps=2|4) and a forced split.
TEST(AttentionCuda, TensorCorePlansMatchFp64SoftmaxAttention) {
  if (::replayssm::cuda::device_count() == 0) GTEST_SKIP() << ::replayssm::cuda::device_summary();
  for (const char* plan : {"warps=4", "warps=2", "warps=2,splits=2"}) {
    SCOPED_TRACE(plan);
    ASSERT_EQ(setenv("RSSM_ATTENTION_PLAN", plan, 1), 0);
    for (const Case& c : {Case{16, 4, 256, true}, Case{40, 8, 128, false}, Case{6, 2, 64, false}}) {
      run_case(c, 0);
      run_case(c, 0, 4);
    }
  }
  ASSERT_EQ(unsetenv("RSSM_ATTENTION_PLAN"), 0);
}

// RSSM_ATTENTION_PLAN="mma=0" (A/B runs) takes the CUDA-core kernel at the tensor-core widths.
TEST(AttentionCuda, CudaCoreKernelAtTensorCoreWidths) {
  if (::replayssm::cuda::device_count() == 0) GTEST_SKIP() << ::replayssm::cuda::device_summary();
  ASSERT_EQ(setenv("RSSM_ATTENTION_PLAN", "mma=0", 1), 0);
  for (const Case& c : {Case{16, 4, 256, true}, Case{40, 8, 128, false}})
    for (const int splits : {1, 0}) run_case(c, splits);
  run_case({16, 4, 256, true}, 0, 4);
  ASSERT_EQ(unsetenv("RSSM_ATTENTION_PLAN"), 0);
}

// The override is parsed strictly (host code: runs without a GPU): a malformed value never
// silently picks a kernel.
TEST(AttentionPlanEnv, RejectsMalformedValues) {
  Attention at;
  at.nh = 4, at.nkv = 2, at.hd = 128;
  for (const char* bad : {"mma=2", "mma=off", "mma=", "mma", "warps=2x", "splits=0", "splits=65",
                          "warps=3", "mma=1,,warps=2", "stages=2"}) {
    ASSERT_EQ(setenv("RSSM_ATTENTION_PLAN", bad, 1), 0);
    EXPECT_THROW(attention_splits(at, 4, 132), ConfigError) << bad;
  }
  ASSERT_EQ(setenv("RSSM_ATTENTION_PLAN", "warps=4,splits=3", 1), 0);
  EXPECT_EQ(attention_splits(at, 4, 132), 3);
  ASSERT_EQ(setenv("RSSM_ATTENTION_PLAN", "mma=0", 1), 0);
  EXPECT_NO_THROW(attention_splits(at, 4, 132));
  ASSERT_EQ(unsetenv("RSSM_ATTENTION_PLAN"), 0);
}

}  // namespace
}  // namespace replayssm::engine::cuda
#endif  // RSSM_WITH_CUDA
