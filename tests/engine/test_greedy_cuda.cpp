// The CUDA engine's greedy token kernel (engine/src/cuda/greedy.cu, cuda::greedy_rows) against
// the host rule (greedy_token: the argmax, the lowest id among equal maxima; -1 for a NaN or an
// infinity): random rows at real vocab sizes (Nemotron-H 131,072, Qwen3.5 248,320, the bundled
// 256, an odd 1,000), rows whose maximum occurs several times (far apart and within one thread's
// stride), maxima at the first and last id, all-equal rows, NaN / +Inf / -Inf anywhere, and a
// guard after the output that must stay untouched.
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <cuda_runtime.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "cuda/device.h"
#include "cuda/kernels.h"
#include "replayssm/engine/sampling.h"

namespace replayssm::engine::cuda {
namespace {

TEST(GreedyCuda, RowsMatchTheHostRule) {
  if (::replayssm::cuda::device_count() == 0) GTEST_SKIP() << ::replayssm::cuda::device_summary();
  for (const int64_t V : {int64_t{256}, int64_t{1000}, int64_t{131072}, int64_t{248320}}) {
    SCOPED_TRACE("vocab " + std::to_string(V));
    std::mt19937 rng(static_cast<uint32_t>(V));
    std::normal_distribution<float> n(0.0f, 3.0f);
    constexpr int kRows = 12;
    std::vector<float> x(static_cast<size_t>(kRows * V));
    for (float& v : x) v = n(rng);
    auto row = [&](int r) { return x.data() + r * V; };
    std::uniform_int_distribution<int64_t> id(0, V - 1);
    // 1: the maximum three times, far apart; 2: twice, one thread stride (256) apart (V > 256);
    // 3: at id 0; 4: at the last id; 5: all equal; 6: NaN; 7: +Inf; 8: -Inf; 9: the maximum
    // twice, adjacent.
    for (const int64_t i : {id(rng), id(rng), id(rng)}) row(1)[i] = 50.0f;
    // (at V = 256 every thread holds one column: the second maximum then sits in another thread)
    row(2)[V / 2] = 60.0f, row(2)[V > 256 ? V / 2 + 256 : V / 4] = 60.0f;
    row(3)[0] = 70.0f;
    row(4)[V - 1] = 70.0f;
    for (int64_t i = 0; i < V; ++i) row(5)[i] = 1.5f;
    row(6)[id(rng)] = std::numeric_limits<float>::quiet_NaN();
    row(7)[id(rng)] = std::numeric_limits<float>::infinity();
    row(8)[V - 1] = -std::numeric_limits<float>::infinity();
    row(9)[V / 3] = 80.0f, row(9)[V / 3 + 1] = 80.0f;
    float* d_x = nullptr;
    int32_t* d_out = nullptr;
    constexpr int kGuard = 8;
    ASSERT_EQ(cudaMalloc(&d_x, x.size() * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_out, (kRows + kGuard) * sizeof(int32_t)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_x, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(cudaMemset(d_out, 0x5A, (kRows + kGuard) * sizeof(int32_t)), cudaSuccess);  // poison
    greedy_rows(d_x, kRows, V, d_out, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<int32_t> out(kRows + kGuard);
    ASSERT_EQ(cudaMemcpy(out.data(), d_out, out.size() * sizeof(int32_t), cudaMemcpyDeviceToHost),
              cudaSuccess);
    cudaFree(d_x);
    cudaFree(d_out);
    for (int r = 0; r < kRows; ++r)
      EXPECT_EQ(out[r], greedy_token({row(r), static_cast<size_t>(V)})) << "row " << r;
    EXPECT_EQ(out[2], V > 256 ? V / 2 : V / 4);
    EXPECT_EQ(out[5], 0);
    EXPECT_EQ(out[6], -1);
    EXPECT_EQ(out[7], -1);
    EXPECT_EQ(out[8], -1);
    EXPECT_EQ(out[9], V / 3);
    for (int g = 0; g < kGuard; ++g) EXPECT_EQ(out[kRows + g], 0x5A5A5A5A) << "guard " << g;
  }
}

}  // namespace
}  // namespace replayssm::engine::cuda
#endif  // RSSM_WITH_CUDA
