// Split state modes fp32/bf16 and fp32/fp16 on the CUDA Mamba-2 replay step (precision.h), on
// the walk of test_mamba2_cuda_split_walk.h (fp32 checkpoints and flush outputs bit-identical to
// fp32/fp32, pad rows, untouched slots, guards). This mode's own checks after every step:
//   - the read copy of every slot in the batch is its checkpoint rounded to nearest even, element
//     for element; the copies of the other slots are untouched;
//   - ordinary rows' outputs differ from fp32/fp32 only by reading the rounded copy (bound below).
// Skipped without a CUDA device.
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "test_mamba2_cuda_split_walk.h"
#include "replayssm/errors.h"
#include "replayssm/mamba2.h"
#include "replayssm/precision.h"
#include "replayssm/ring.h"

namespace replayssm::testing::cuda_test {
namespace {

using m2::Params;
using m2::Shape;
constexpr DType kF32 = DType::kF32, kF16 = DType::kF16, kBF16 = DType::kBF16;
constexpr Shape kSmall{4, 16, 64, 2, "small 4x16x64 g2"};
constexpr Shape kNanoHead{8, 80, 128, 2, "nano-like 8x80x128 g2"};

void run_split(const Shape& shape, DType in, StateFormat read, int L, int steps, uint64_t seed) {
  const StateMode mode{StateFormat::kFp32, read, false};
  SCOPED_TRACE(std::string(shape.name) + ", mode " + mode.name() + ", in " + dtype_name(in) +
               ", L " + std::to_string(L) + ", seed " + std::to_string(seed));
  Rng rng(seed);
  m2::Options o;
  o.dtype = in;
  const Params prm(shape, o, rng);
  const int64_t slots = 9;
  DevPool ref_pool(shape, slots, L, kF32, in, rng), split(shape, slots, L, kF32, in, rng);
  const DType rd = read == StateFormat::kBf16 ? kBF16 : kF16;
  DeviceBuffer copy(rd, {slots, shape.H, shape.P, shape.N}, 97);
  const int64_t n = shape.H * shape.P * shape.N, HP = shape.H * shape.P;
  const double u16 = read == StateFormat::kBf16 ? 0x1p-8 : 0x1p-11;
  const size_t es = dtype_size(rd);
  std::vector<uint8_t> C_before;
  SplitWalkHooks hooks;
  hooks.cache = [&](const DevPool& pool) {
    mamba2::Cache c = pool.cache();
    c.mode = mode;
    c.read.values = copy.view();
    return c;
  };
  hooks.before_step = [&] { C_before = copy.download(); };
  hooks.check_copy = [&](const SplitWalkStep& st) {
    const std::vector<double> Cv = copy.values();
    const std::vector<uint8_t> C_after = copy.download();
    for (int32_t slot = 0; slot < slots; ++slot) {
      if (!st.in_batch(slot)) {
        const size_t off = static_cast<size_t>(slot * n);
        ASSERT_EQ(std::memcmp(C_before.data() + off * es, C_after.data() + off * es, n * es), 0)
            << "read copy of slot " << slot << " (not in the batch) changed";
        continue;
      }
      for (int64_t i = 0; i < n; ++i) {  // every step: the copy is the rounded checkpoint
        float s;
        std::memcpy(&s, st.split_state.data() + (slot * n + i) * 4, 4);
        ASSERT_EQ(Cv[slot * n + i], round_to(rd, s))
            << "read copy element " << i << " of slot " << slot << " is not the rounded checkpoint";
      }
    }
  };
  hooks.check_ordinary = [&](const SplitWalkStep& st, int64_t b) {
    // Reading the rounded copy: |dy| <= 2 u16 sum_n |S0| |C| |abar| + output rounding, bounded
    // by 4 u16 max|y| + 4 u16 (the states are O(1)) — far below any real divergence.
    double scale = 0.0;
    for (double v : st.y_ref) scale = std::max(scale, std::abs(v));
    for (int64_t i = 0; i < HP; ++i)
      ASSERT_LE(std::abs(st.y_ref[b * HP + i] - st.y[b * HP + i]),
                4 * u16 * scale + 4 * u16 + (in == kBF16 ? 0x1p-7 * scale : 0.0))
          << "ordinary row " << b << " output " << i;
  };
  walk_split(shape, L, steps, rng, prm, ref_pool, split, hooks);
  EXPECT_TRUE(copy.guards_intact()) << "guard bytes of the read copy";
}

TEST(Mamba2CudaModes, SplitSixteenBitReadCopiesKeepTheFp32Recurrence) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (StateFormat read : {StateFormat::kBf16, StateFormat::kFp16})
    for (DType in : {kBF16, kF32}) {
      run_split(kSmall, in, read, 4, 40, test_seed(15001));
      run_split(kSmall, in, read, 16, 70, test_seed(15002));
      if (::testing::Test::HasFailure()) return;
    }
  run_split(kNanoHead, kBF16, StateFormat::kBf16, 16, 40, test_seed(15003));
}

TEST(Mamba2CudaModes, UnbuiltModesAreRejectedByName) {
  RSSM_SKIP_WITHOUT_CUDA();
  Rng rng(test_seed(15004));
  m2::Options o;
  const Params prm(kSmall, o, rng);
  DevLayer layer(prm);
  const RingConfig cfg{4, 1, RingMode::kDecode};
  DevPool pool(kSmall, 3, 4, kF32, kF32, rng);
  DeviceBuffer copy(DType::kU8, {3, kSmall.H, kSmall.P, kSmall.N / 2}, 98);
  DevStep st(prm, 1);
  st.put({nullptr}, {-1});
  mamba2::Cache c = pool.cache();
  c.mode = parse_state_mode("fp8/nvfp4");  // an fp8 checkpoint is not built for CUDA
  c.read.values = copy.view();
  try {
    mamba2::replay_step(layer.layer, c, pool.cursors(cfg), st.tokens(), st.rows(-1), st.y.view());
    FAIL() << "fp8/nvfp4 ran on CUDA";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("fp8/nvfp4"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace replayssm::testing::cuda_test
#endif  // RSSM_WITH_CUDA
