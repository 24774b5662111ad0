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
#include "cuda_test_util.h"
#include "replayssm/codecs.h"
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

/// A quantised read copy [slots, H, P, N] on the device: codes and scales (precision.h layout).
struct DevCopy {
  StateFormat f;
  int64_t slots, H, P, N;
  DeviceBuffer values, scales, global;  // fp8: scales = rows [slots, H, P] f32; nvfp4: blocks
  DevCopy(StateFormat f_, int64_t slots_, const Shape& s)
      : f(f_), slots(slots_), H(s.H), P(s.P), N(s.N),
        values(kU8, {slots_, s.H, s.P, f_ == StateFormat::kNvfp4 ? s.N / 2 : s.N}, 71),
        scales(f_ == StateFormat::kNvfp4 ? kU8 : kF32,
               f_ == StateFormat::kNvfp4 ? std::vector<int64_t>{slots_, s.H, s.P, s.N / 16}
                                         : std::vector<int64_t>{slots_, s.H, s.P},
               72),
        global(kF32, {slots_, s.H}, 73) {}
  StateBuffer buffer() const {
    StateBuffer b;
    b.values = values.view();
    if (f == StateFormat::kNvfp4)
      b.scales.blocks = scales.view(), b.scales.global = global.view();
    else
      b.scales.rows = scales.view();
    return b;
  }
  /// Every byte the format uses, per tensor.
  std::vector<std::vector<uint8_t>> download() const {
    std::vector<std::vector<uint8_t>> out{values.download(), scales.download()};
    if (f == StateFormat::kNvfp4) out.push_back(global.download());
    return out;
  }
  /// One slot's part of each tensor of `all`.
  std::vector<std::vector<uint8_t>> slot_of(const std::vector<std::vector<uint8_t>>& all,
                                            int64_t slot) const {
    std::vector<std::vector<uint8_t>> out;
    for (const auto& t : all) {
      const size_t per = t.size() / static_cast<size_t>(slots);
      out.emplace_back(t.begin() + slot * per, t.begin() + (slot + 1) * per);
    }
    return out;
  }
  /// The CPU codec's encoding of one slot's float32 state [H*P*N], as slot_of lays it out.
  std::vector<std::vector<uint8_t>> encode(std::vector<float> x) const {
    const int64_t hr = H * P;
    std::vector<std::vector<uint8_t>> out;
    if (f == StateFormat::kNvfp4) {
      std::vector<uint8_t> codes(hr * N / 2), blocks(hr * N / 16);
      std::vector<uint8_t> g(H * 4);
      codecs::Nvfp4 q{make_view(codes.data(), kU8, {hr, N / 2}),
                      make_view(blocks.data(), kU8, {hr, N / 16}),
                      make_view(g.data(), kF32, {H}), P};
      codecs::nvfp4_encode(make_view(x.data(), kF32, {hr, N}), q);
      out = {codes, blocks, g};
    } else {
      std::vector<uint8_t> codes(hr * N), rows(hr * 4);
      codecs::Fp8Rows q{make_view(codes.data(), kU8, {hr, N}), make_view(rows.data(), kF32, {hr})};
      codecs::fp8_encode(make_view(x.data(), kF32, {hr, N}), q);
      out = {codes, rows};
    }
    return out;
  }
  /// The CPU codec's decoding of one slot (slot_of layout) to doubles [H*P*N].
  Vec decode_slot(std::vector<std::vector<uint8_t>> t) const {
    const int64_t hr = H * P;
    std::vector<float> y(hr * N);
    if (f == StateFormat::kNvfp4) {
      codecs::Nvfp4 q{make_view(t[0].data(), kU8, {hr, N / 2}), make_view(t[1].data(), kU8, {hr, N / 16}),
                      make_view(t[2].data(), kF32, {H}), P};
      codecs::nvfp4_decode(q, make_view(y.data(), kF32, {hr, N}));
    } else {
      codecs::Fp8Rows q{make_view(t[0].data(), kU8, {hr, N}), make_view(t[1].data(), kF32, {hr})};
      codecs::fp8_decode(q, make_view(y.data(), kF32, {hr, N}));
    }
    return Vec(y.begin(), y.end());
  }
  bool guards_intact() const {
    return values.guards_intact() && scales.guards_intact() && global.guards_intact();
  }
};

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
  DevCopy copy(read, slots, shape);
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
  DevCopy nv(StateFormat::kNvfp4, 3, kSmall), f8(StateFormat::kFp8, 3, kSmall);
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
  auto shift = [](TensorView t, int bytes) {
    t.data = static_cast<uint8_t*>(t.data) + bytes;
    return t;
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
    b.values = shift(b.values, 1);
    v.emplace_back("values", b);
    b = nv.buffer();
    b.scales.blocks = shift(b.scales.blocks, 2);
    v.emplace_back("scales.blocks", b);
    b = nv.buffer();
    b.scales.global = shift(b.scales.global, 2);
    v.emplace_back("scales.global", b);
    return v;
  }();
  for (const auto& [what, b] : misaligned) {
    const std::string m = message("fp32/nvfp4", b, autop, ConfigError(""));
    EXPECT_NE(m.find(what), std::string::npos) << what << ": '" << m << "'";
    EXPECT_NE(m.find("aligned"), std::string::npos) << m;
  }
  StateBuffer rows = f8.buffer();
  rows.scales.rows = shift(rows.scales.rows, 2);
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
