// The CUDA dispatchers' launch plans, host side (no GPU needed: plans size their grids by the
// H200's 132 SMs where there is no device). Two kinds of checks: every plan the dispatcher
// returns is one the launcher accepts (fields within the kernels' compiled ranges, heads per
// block dividing the group), and the choices measured best on the H200 stay the choices
// (bench/NOTES.md and bench/NOTES_gdn.md, "Session 14").
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <string>

#include "cuda/common/memory.h"
#include "cuda/gdn/gdn_cuda.h"
#include "cuda/mamba2/mamba2_cuda.h"
#include "replayssm/gdn.h"
#include "replayssm/mamba2.h"

namespace {

using namespace replayssm;
namespace cm = cuda::mamba2;
namespace cg = cuda::gdn;

constexpr int64_t kBatches[] = {1, 2, 8, 16, 32, 64, 128, 256, 512};

struct M2Shape {
  const char* name;
  mamba2::Dims d;
};
const M2Shape kM2Shapes[] = {{"nano-4b", {96, 80, 128, 8}},
                             {"super-120b", {128, 64, 128, 8}},
                             {"odd", {24, 48, 64, 3}},
                             {"tiny", {8, 16, 64, 2}}};

TEST(CudaPlans, Mamba2ReplayPlansAreLaunchable) {
  for (const M2Shape& s : kM2Shapes)
    for (int64_t b : kBatches)
      for (int L : {4, 16, 32})
        for (int bits : {32, 16, 8, 4}) {
          SCOPED_TRACE(std::string(s.name) + " batch " + std::to_string(b) + " L " +
                       std::to_string(L) + " bits " + std::to_string(bits));
          const cm::Plan p = cm::plan_replay_bits(s.d, b, L, bits);
          const int64_t hpg = s.d.nheads / s.d.ngroups;
          EXPECT_GE(p.heads_per_block, 1);
          EXPECT_EQ(hpg % p.heads_per_block, 0);
          EXPECT_GE(p.rows_per_block, 1);
          EXPECT_LE(p.rows_per_block, s.d.headdim);
          EXPECT_TRUE(p.rows_per_thread == 4 || p.rows_per_thread == 8);
          EXPECT_TRUE(p.rows_per_thread == 4 || bits == 32) << "8 rows per thread: fp32 only";
          if (p.heads_per_block > 1) {
            EXPECT_EQ(p.rows_per_block, s.d.headdim);
          }
        }
}

TEST(CudaPlans, Mamba2MeasuredChoices) {
  if (cuda::device_sms() != 132) GTEST_SKIP() << "the choices were measured on 132 SMs";
  const mamba2::Dims nano{96, 80, 128, 8}, super{128, 64, 128, 8};
  // Super-120B fp32: four heads per block from batch 8, three blocks per SM (91de005: window
  // 308.1 µs at batch 256 against 314.6 at eight heads).
  for (int64_t b : {8, 32, 64, 128, 256, 512}) {
    const cm::Plan p = cm::plan_replay(super, b, 16, DType::kF32);
    EXPECT_EQ(p.heads_per_block, 4) << "batch " << b;
    EXPECT_EQ(p.rows_per_block, 64) << "batch " << b;
  }
  // With an fp32 ring (the CUDA engine's) K = 4 holds two blocks per SM and K = 2 would quarter
  // the fewest-waves choice (K = 8 from batch 16; eight heads per block measured 1.4x faster than
  // two at two blocks per SM): the wave rule's choice stands.
  EXPECT_EQ(cm::plan_replay(super, 8, 16, DType::kF32, DType::kF32).heads_per_block, 4);
  for (int64_t b : {32, 256, 512})
    EXPECT_EQ(cm::plan_replay(super, b, 16, DType::kF32, DType::kF32).heads_per_block, 8)
        << "batch " << b;
  // Nano-4B fp32: six heads per block (two blocks per SM; no K fits three).
  for (int64_t b : {32, 256, 512})
    EXPECT_EQ(cm::plan_replay(nano, b, 16, DType::kF32).heads_per_block, 6) << "batch " << b;
  // The ordinary launch folds no row: the flush rows have a launch of their own.
  const cm::Plan p = cm::plan_replay(super, 256, 16, DType::kF32);
  EXPECT_EQ(p.route, cm::Route::kOutputOnly);
  EXPECT_EQ(p.flush_kernel, 1);
}

struct GdnShape {
  const char* name;
  gdn::Dims d;
};
const GdnShape kGdnShapes[] = {{"qwen3.5-4b", {16, 32, 128, 128, gdn::Gate::kScalar}},
                               {"qwen3.5-122b", {16, 64, 128, 128, gdn::Gate::kScalar}},
                               {"kimi-linear", {32, 32, 128, 128, gdn::Gate::kChannel}},
                               {"odd", {3, 6, 64, 96, gdn::Gate::kScalar}},
                               {"odd-kda", {3, 3, 64, 96, gdn::Gate::kChannel}}};

TEST(CudaPlans, GdnReplayPlansAreLaunchable) {
  for (const GdnShape& s : kGdnShapes)
    for (int64_t b : kBatches)
      for (int L : {4, 16, 32})
        for (DType st : {DType::kF32, DType::kBF16}) {
          SCOPED_TRACE(std::string(s.name) + " batch " + std::to_string(b) + " L " +
                       std::to_string(L) + " " + dtype_name(st));
          const cg::Plan p = cg::plan_replay(s.d, b, L, st);
          EXPECT_TRUE(p.kernel == 1 || p.kernel == 2);
          if (p.kernel != 2) continue;
          const int64_t group = s.d.num_v_heads / s.d.num_k_heads;
          EXPECT_TRUE(p.rows_per_thread == 4 || p.rows_per_thread == 8);
          EXPECT_GE(p.heads_per_block, 1);
          EXPECT_EQ(group % p.heads_per_block, 0);
          if (s.d.gate == gdn::Gate::kChannel) {
            EXPECT_EQ(p.heads_per_block, 1);
          }
          EXPECT_GE(p.units_per_head, 1);
          EXPECT_GE(p.stages, 1);
          EXPECT_LE(p.stages, 4);
        }
}

TEST(CudaPlans, GdnMeasuredChoices) {
  if (cuda::device_sms() != 132) GTEST_SKIP() << "the choices were measured on 132 SMs";
  const gdn::Dims q4{16, 32, 128, 128, gdn::Gate::kScalar};
  const gdn::Dims q122{16, 64, 128, 128, gdn::Gate::kScalar};
  // Qwen3.5-4B: two value heads, whole V (four 32-row units) per block, 4 rows per thread.
  for (int64_t b : {64, 256, 512}) {
    const cg::Plan p = cg::plan_replay(q4, b, 16, DType::kF32);
    EXPECT_EQ(p.kernel, 2);
    EXPECT_EQ(p.heads_per_block, 2) << "batch " << b;
    EXPECT_EQ(p.rows_per_thread, 4) << "batch " << b;
    EXPECT_EQ(p.units_per_head, 4) << "batch " << b;
  }
  // Qwen3.5-122B: four value heads and half of V per block at 4 rows per thread where those
  // blocks fill three per SM (af3cdd6: window 332.8 µs at batch 256 against 368.9); batch 8 is
  // latency-bound: one whole value head per block (16.8 µs; the large-batch plan forced there
  // takes 25.0).
  for (int64_t b : {16, 32, 256, 512}) {
    const cg::Plan p = cg::plan_replay(q122, b, 16, DType::kF32);
    EXPECT_EQ(p.heads_per_block, 4) << "batch " << b;
    EXPECT_EQ(p.rows_per_thread, 4) << "batch " << b;
    EXPECT_EQ(p.units_per_head, 2) << "batch " << b;
  }
  const cg::Plan p8 = cg::plan_replay(q122, 8, 16, DType::kF32);
  EXPECT_EQ(p8.heads_per_block, 1);
  EXPECT_EQ(p8.rows_per_thread, 4);
  EXPECT_EQ(p8.units_per_head, 4);
  // The pipelined flush kernel from 6 items of an all-flush step per block of it (dbc30e3: faster
  // from Qwen3.5-4B batch 32 / Qwen3.5-122B batch 16, slower mixed steps below).
  EXPECT_EQ(cg::plan_replay(q4, 16, 16, DType::kF32).flush_pipeline, 0);
  EXPECT_EQ(cg::plan_replay(q122, 8, 16, DType::kF32).flush_pipeline, 0);
  for (int64_t b : {32, 64, 256, 512})
    EXPECT_EQ(cg::plan_replay(q4, b, 16, DType::kF32).flush_pipeline, 1) << "batch " << b;
  EXPECT_EQ(cg::plan_replay(q122, 16, 16, DType::kF32).flush_pipeline, 1);
  // Conventional step at small batches (session 22 sweep, bench/NOTES_gdn.md "Session 22"): up to
  // 2 MiB of state 1 row per thread in blocks of 16, to 4 MiB 2 rows in blocks of 32 (Qwen3.5-4B
  // batch 2 4.63 µs against 4.99 and FLA's 4.75), then 4 rows in blocks of 32.
  const cg::Plan c1 = cg::plan_conventional(q4, 1, DType::kF32);
  EXPECT_EQ(c1.rows_per_thread, 1);
  EXPECT_EQ(c1.rows_per_block, 16);
  for (const cg::Plan& c2 :
       {cg::plan_conventional(q4, 2, DType::kF32), cg::plan_conventional(q122, 1, DType::kF32)}) {
    EXPECT_EQ(c2.rows_per_thread, 2);
    EXPECT_EQ(c2.rows_per_block, 32);
  }
  const cg::Plan c4 = cg::plan_conventional(q4, 4, DType::kF32);
  EXPECT_EQ(c4.rows_per_thread, 4);
  EXPECT_EQ(c4.rows_per_block, 32);
  // KDA keeps 2 rows per thread in blocks sized by rows_per_block() (16 rows at Kimi-Linear
  // batch 2, 4 MiB): the 32-row rule is GDN's only.
  const gdn::Dims kimi{32, 32, 128, 128, gdn::Gate::kChannel};
  const cg::Plan k2 = cg::plan_conventional(kimi, 2, DType::kF32);
  EXPECT_EQ(k2.rows_per_thread, 2);
  EXPECT_EQ(k2.rows_per_block, 16);
}

}  // namespace
#endif  // RSSM_WITH_CUDA
