// Split state modes fp32/nvfp4 and fp32/fp8 on the CUDA Mamba-2 replay step (precision.h), on the
// walk of test_mamba2_cuda_split_walk.h (fp32 checkpoints and flush outputs bit-identical to
// fp32/fp32, pad rows, untouched slots, guards). This mode's own checks after every step:
//   - reset_slots zeroes every byte of the copy and its scales;
//   - a flushed slot's read copy (codes and scales) is byte for byte what the CPU codec
//     (codecs::nvfp4_encode / fp8_encode, with precision.h's grouping) makes of its new
//     checkpoint; the copies of slots that did not flush are unchanged;
//   - ordinary rows against the fp64 oracle started from what the GPU stored (checkpoint, ring,
//     cursors and the decoded read copy): the verify tests' rounding bound u k |y|_abs
//     (test_mamba2_cuda_oracle.h), bf16 outputs adding 2^-8 |y|;
// Skipped without a CUDA device.
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/mamba2/mamba2_cuda.h"
#include "cuda_quant_copy.h"
#include "cuda_test_util.h"
#include "replayssm/errors.h"
#include "replayssm/mamba2.h"
#include "replayssm/precision.h"
#include "replayssm/ring.h"
#include "test_mamba2_cuda_oracle.h"
#include "test_mamba2_cuda_split_walk.h"

namespace replayssm::testing::cuda_test {
namespace {

using m2::Params;
using m2::Shape;
using ref::Vec;
constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16, kU8 = DType::kU8;
constexpr Shape kSmall{4, 16, 64, 2, "small 4x16x64 g2"};
constexpr Shape kNanoHead{8, 80, 128, 2, "nano-like 8x80x128 g2"};

void run_quant(const Shape& shape, DType in, StateFormat read, int L, int steps, uint64_t seed) {
  const StateMode mode{StateFormat::kFp32, read, false};
  SCOPED_TRACE(std::string(shape.name) + ", mode " + mode.name() + ", in " + dtype_name(in) +
               ", L " + std::to_string(L) + ", seed " + std::to_string(seed));
  Rng rng(seed);
  m2::Options o;
  o.dtype = in;
  const Params prm(shape, o, rng);
  const int64_t slots = 9;
  const DType ring = in;  // a bf16 ring with bf16 inputs (the engine's choice)
  DevPool ref_pool(shape, slots, L, kF32, ring, rng), split(shape, slots, L, kF32, ring, rng);
  DevCopy copy(read, slots, shape.H, shape.P, shape.N);
  const int64_t n = shape.H * shape.P * shape.N, HP = shape.H * shape.P;
  std::vector<std::vector<uint8_t>> copy_before;
  bool first = true;
  SplitWalkHooks hooks;
  hooks.cache = [&](const DevPool& pool) {
    mamba2::Cache c = pool.cache();
    c.mode = mode;
    c.read = copy.buffer();
    return c;
  };
  hooks.before_step = [&] {
    copy_before = copy.download();
    if (!first) return;
    first = false;  // right after reset_slots: every byte of the owned slots' copies is 0
    for (int32_t slot : {1, 3, 5, 7})
      for (const auto& t : copy.slot_of(copy_before, slot))
        for (uint8_t byte : t) ASSERT_EQ(byte, 0) << "reset_slots left a byte of slot " << slot;
  };
  hooks.check_copy = [&](const SplitWalkStep& st) {
    const auto copy_after = copy.download();
    for (int32_t slot = 0; slot < slots; ++slot) {
      if (st.in_batch(slot) && split.cursor(st.before, slot).is_flush) {
        // The codec's encoding of the new checkpoint, byte for byte.
        std::vector<float> S(n);
        std::memcpy(S.data(), st.split_state.data() + slot * n * 4, n * 4);
        const auto want = copy.encode(S), got = copy.slot_of(copy_after, slot);
        for (size_t t = 0; t < want.size(); ++t)
          for (size_t i = 0; i < want[t].size(); ++i)
            ASSERT_EQ(got[t][i], want[t][i]) << "slot " << slot << " read copy tensor " << t
                                             << " byte " << i << " is not the codec's encoding";
      } else {
        ASSERT_EQ(copy.slot_of(copy_after, slot), copy.slot_of(copy_before, slot))
            << "read copy of slot " << slot << " changed without a flush";
      }
    }
  };
  hooks.check_ordinary = [&](const SplitWalkStep& st, int64_t b) {
    // The oracle from what the GPU stored: checkpoint, ring, cursor and the decoded copy.
    const int32_t slot = st.ids[b];
    ref::Mamba2Seq q = seq_of(split, st.before, slot);
    q.prec.mode = mode;
    q.prec.read = copy.decode_slot(copy.slot_of(copy_before, slot));
    ref::Mamba2Seq qa = abs_seq(q);
    qa.prec.read = absv(q.prec.read);
    ref::Mamba2Params pa = prm.ref;
    pa.D = absv(pa.D);
    const Vec k = k_of(prm, q, {st.toks[b]}, st.cfg);
    const Vec y_want = ref::mamba2_replay_step(prm.ref, st.cfg, q, st.toks[b]);
    const Vec y_abs = ref::mamba2_replay_step(pa, st.cfg, qa, abs_token(st.toks[b]));
    for (int64_t i = 0; i < HP; ++i) {
      const double gate = st.toks[b].z.empty() ? 1.0 : std::abs(m2::silu(st.toks[b].z[i]));
      double tol = m2::kU32 * k[i / shape.P] * y_abs[i] * gate;
      if (in == kBF16) tol += m2::kBf16Out * (std::abs(y_want[i]) + tol);
      ASSERT_LE(std::abs(st.y[b * HP + i] - y_want[i]), tol)
          << "ordinary row " << b << " (slot " << slot << ", h " << q.cursor.h << ") output "
          << i << ": got " << st.y[b * HP + i] << ", want " << y_want[i];
    }
  };
  walk_split(shape, L, steps, rng, prm, ref_pool, split, hooks);
  EXPECT_TRUE(copy.guards_intact()) << "guard bytes of the read copy";
}

TEST(Mamba2CudaQuantModes, QuantisedReadCopiesMatchTheOracleAndKeepTheFp32Recurrence) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (StateFormat read : {StateFormat::kNvfp4, StateFormat::kFp8})
    for (DType in : {kBF16, kF32}) {
      run_quant(kSmall, in, read, 4, 40, test_seed(16001));
      run_quant(kSmall, in, read, 16, 70, test_seed(16002));
      if (::testing::Test::HasFailure()) return;
    }
  run_quant(kNanoHead, kBF16, StateFormat::kNvfp4, 16, 40, test_seed(16003));
  run_quant(kNanoHead, kBF16, StateFormat::kFp8, 16, 40, test_seed(16004));
}

TEST(Mamba2CudaQuantModes, MisshapenMisalignedOrMisroutedCopiesAreRejected) {
  RSSM_SKIP_WITHOUT_CUDA();
  Rng rng(test_seed(16005));
  m2::Options o;
  const Params prm(kSmall, o, rng);
  DevLayer layer(prm);
  const RingConfig cfg{4, 1, RingMode::kDecode};
  DevPool pool(kSmall, 3, 4, kF32, kF32, rng);
  DevCopy nv(StateFormat::kNvfp4, 3, kSmall.H, kSmall.P, kSmall.N),
      f8(StateFormat::kFp8, 3, kSmall.H, kSmall.P, kSmall.N);
  DeviceBuffer wrong(kU8, {3, kSmall.H, kSmall.P, kSmall.N / 8}, 74);
  DevStep st(prm, 1);
  st.put({nullptr}, {-1});
  // Runs a step of `mode` over `read` with `plan`; returns the error's message ("" if none).
  auto message = [&](const char* mode, const StateBuffer& read, const cuda::mamba2::Plan& plan,
                     auto error_tag) -> std::string {
    using E = decltype(error_tag);
    mamba2::Cache c = pool.cache();
    c.mode = parse_state_mode(mode);
    c.read = read;
    try {
      cuda::mamba2::replay_step(layer.layer, c, pool.cursors(cfg), st.tokens(), st.rows(-1),
                                st.y.view(), plan);
    } catch (const E& e) {
      return e.what();
    }
    return "";
  };
  const cuda::mamba2::Plan autop;
  StateBuffer bad = nv.buffer();
  bad.scales.blocks = wrong.view();
  EXPECT_NE(message("fp32/nvfp4", bad, autop, ShapeError("")).find("scales.blocks"),
            std::string::npos) << "a block-scale tensor of the wrong shape";
  // Misaligned values (16 bytes), block, global and row scales (4 bytes): ConfigError by name.
  const std::vector<std::pair<std::string, StateBuffer>> misaligned = [&] {
    std::vector<std::pair<std::string, StateBuffer>> v;
    StateBuffer b = nv.buffer();
    b.values = shifted(b.values, 1);
    v.emplace_back("values", b);
    b = nv.buffer();
    b.scales.blocks = shifted(b.scales.blocks, 2);
    v.emplace_back("scales.blocks", b);
    b = nv.buffer();
    b.scales.global = shifted(b.scales.global, 2);
    v.emplace_back("scales.global", b);
    return v;
  }();
  for (const auto& [what, b] : misaligned) {
    const std::string m = message("fp32/nvfp4", b, autop, ConfigError(""));
    EXPECT_NE(m.find(what), std::string::npos) << what << ": '" << m << "'";
    EXPECT_NE(m.find("aligned"), std::string::npos) << m;
  }
  StateBuffer rows = f8.buffer();
  rows.scales.rows = shifted(rows.scales.rows, 2);
  const std::string m = message("fp32/fp8", rows, autop, ConfigError(""));
  EXPECT_NE(m.find("scales.rows"), std::string::npos) << "'" << m << "'";
  // A quantised copy is read output-only: a forced state-and-output route is refused.
  cuda::mamba2::Plan st_route;
  st_route.route = cuda::mamba2::Route::kStateAndOutput;
  EXPECT_NE(message("fp32/nvfp4", nv.buffer(), st_route, ConfigError("")).find("output-only"),
            std::string::npos);
  EXPECT_TRUE(nv.guards_intact() && f8.guards_intact() && pool.guards_intact());
}

}  // namespace
}  // namespace replayssm::testing::cuda_test
#endif  // RSSM_WITH_CUDA
