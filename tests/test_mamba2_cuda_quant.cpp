// Split state modes fp32/nvfp4 and fp32/fp8 on the CUDA Mamba-2 replay step (precision.h): a pool
// in the split mode and a pool in fp32/fp32 decode the same token streams through the public API
// over many flushes. Checked after every step:
//   - the fp32 checkpoints of the two pools are equal bit for bit (nothing read from the
//     quantised copy enters the recurrence), and flush rows' outputs are equal bit for bit;
//   - a flushed slot's read copy (codes and scales) is byte for byte what the CPU codec
//     (codecs::nvfp4_encode / fp8_encode, with precision.h's grouping) makes of its new
//     checkpoint; the copies of slots that did not flush are unchanged;
//   - ordinary rows against the fp64 oracle started from what the GPU stored (checkpoint, ring,
//     cursors and the decoded read copy): the verify tests' rounding bound u k |y|_abs
//     (test_mamba2_cuda_oracle.h), bf16 outputs adding 2^-8 |y|;
//   - pad rows give y = 0; slots outside the batch (checkpoint, copy, scales) untouched; guards.
// Skipped without a CUDA device.
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "replayssm/codecs.h"
#include "replayssm/errors.h"
#include "replayssm/mamba2.h"
#include "replayssm/precision.h"
#include "replayssm/ring.h"
#include "test_mamba2_cuda_oracle.h"

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
  DevLayer layer(prm);
  const RingConfig cfg{L, 1, RingMode::kDecode};
  const int64_t slots = 9;
  const DType ring = in;  // a bf16 ring with bf16 inputs (the engine's choice)
  DevPool ref_pool(shape, slots, L, kF32, ring, rng), split(shape, slots, L, kF32, ring, rng);
  DevCopy copy(read, slots, shape);
  auto split_cache = [&] {
    mamba2::Cache c = split.cache();
    c.mode = mode;
    c.read = copy.buffer();
    return c;
  };
  const std::vector<int32_t> owned{1, 3, 5, 7};  // slots 0, 2, 4, 6, 8 are never in a batch
  {
    DeviceBuffer idb(DType::kI32, {4}, 95);
    idb.set_values(std::vector<double>(owned.begin(), owned.end()));
    Rows rows;
    rows.slot_ids = idb.view();
    mamba2::Cache a = ref_pool.cache(), b = split_cache();
    mamba2::reset_slots(a, rows);
    mamba2::reset_slots(b, rows);
    for (DevPool* p : {&ref_pool, &split}) {
      RingCursors cur = p->cursors(cfg);
      replayssm::reset(cur, rows);
    }
    cuda::device_synchronize();
  }
  const auto fresh = copy.download();
  for (int32_t slot : owned)
    for (const auto& t : copy.slot_of(fresh, slot))
      for (uint8_t byte : t) ASSERT_EQ(byte, 0) << "reset_slots left a byte of slot " << slot << "'s copy";
  const int64_t n = shape.H * shape.P * shape.N, HP = shape.H * shape.P;
  const int64_t batch = 6;  // 4 sequences (some steps: pads instead) and 2 pad rows
  DevStep sa(prm, batch), sb(prm, batch);
  DeviceBuffer acc(DType::kI32, {batch}, 96);
  int flush_rows = 0, ordinary_rows = 0;
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<int> order{-1, -1};
    for (int i = 0; i < 4; ++i) order.push_back(step >= 2 * i && rng.uniform(0, 1) < 0.9 ? i : -1);
    rng.shuffle(order);
    std::vector<ref::Mamba2Token> toks(batch);
    std::vector<const ref::Mamba2Token*> tp(batch, nullptr);
    std::vector<int32_t> ids(batch, -1);
    std::vector<double> av(batch, 0.0);
    for (int64_t b = 0; b < batch; ++b)
      if (order[b] >= 0) toks[b] = prm.token(rng), tp[b] = &toks[b], ids[b] = owned[order[b]], av[b] = 1;
    for (DevStep* st : {&sa, &sb}) {
      st->put(tp, ids);
      st->y.poison();
    }
    acc.set_values(av);
    const DevPool::Snapshot before = split.snapshot();
    const auto copy_before = copy.download();
    mamba2::Cache ca = ref_pool.cache(), cb = split_cache();
    mamba2::replay_step(layer.layer, ca, ref_pool.cursors(cfg), sa.tokens(), sa.rows(-1), sa.y.view());
    mamba2::replay_step(layer.layer, cb, split.cursors(cfg), sb.tokens(), sb.rows(-1), sb.y.view());
    for (DevPool* p : {&ref_pool, &split}) {
      RingCursors cur = p->cursors(cfg);
      replayssm::commit(cur, sb.rows(-1), acc.view());
    }
    cuda::device_synchronize();
    const std::vector<uint8_t> Sa = ref_pool.state.download(), Sb = split.state.download();
    const auto copy_after = copy.download();
    for (int32_t slot : owned)
      ASSERT_EQ(std::memcmp(Sa.data() + slot * n * 4, Sb.data() + slot * n * 4, n * 4), 0)
          << "the fp32 checkpoints of slot " << slot
          << " differ: the read copy entered the recurrence";
    for (int32_t slot = 0; slot < slots; ++slot) {
      int64_t row = -1;
      for (int64_t b = 0; b < batch; ++b)
        if (ids[b] == slot) row = b;
      const bool flushed = row >= 0 && split.cursor(before, slot).is_flush;
      if (flushed) {  // the copy is the codec's encoding of the new checkpoint, byte for byte
        std::vector<float> S(n);
        std::memcpy(S.data(), Sb.data() + slot * n * 4, n * 4);
        const auto want = copy.encode(S), got = copy.slot_of(copy_after, slot);
        for (size_t t = 0; t < want.size(); ++t)
          for (size_t i = 0; i < want[t].size(); ++i)
            ASSERT_EQ(got[t][i], want[t][i]) << "slot " << slot << " read copy tensor " << t
                                             << " byte " << i << " is not the codec's encoding";
      } else {
        ASSERT_EQ(copy.slot_of(copy_after, slot), copy.slot_of(copy_before, slot))
            << "read copy of slot " << slot << " changed without a flush";
      }
      if (row < 0) {
        ASSERT_EQ(std::memcmp(before[0].data() + slot * n * 4, Sb.data() + slot * n * 4, n * 4), 0)
            << "checkpoint of slot " << slot << " (not in the batch) changed";
      }
    }
    const Vec ya = sa.y.values(), yb = sb.y.values();
    for (int64_t b = 0; b < batch; ++b) {
      if (order[b] < 0) {
        for (int64_t i = 0; i < HP; ++i) ASSERT_EQ(yb[b * HP + i], 0.0) << "pad row " << b;
        continue;
      }
      const int32_t slot = ids[b];
      ref::Mamba2Seq q = seq_of(split, before, slot);
      if (q.cursor.is_flush) {
        ++flush_rows;
        for (int64_t i = 0; i < HP; ++i)
          ASSERT_EQ(yb[b * HP + i], ya[b * HP + i]) << "flush row " << b << " output " << i;
        continue;
      }
      ++ordinary_rows;
      q.prec.mode = mode;
      q.prec.read = copy.decode_slot(copy.slot_of(copy_before, slot));
      ref::Mamba2Seq qa = abs_seq(q);
      qa.prec.read = absv(q.prec.read);
      ref::Mamba2Params pa = prm.ref;
      pa.D = absv(pa.D);
      const Vec k = k_of(prm, q, {toks[b]}, cfg);
      const Vec y_ref = ref::mamba2_replay_step(prm.ref, cfg, q, toks[b]);
      const Vec y_abs = ref::mamba2_replay_step(pa, cfg, qa, abs_token(toks[b]));
      for (int64_t i = 0; i < HP; ++i) {
        const double gate = toks[b].z.empty() ? 1.0 : std::abs(m2::silu(toks[b].z[i]));
        double tol = m2::kU32 * k[i / shape.P] * y_abs[i] * gate;
        if (in == kBF16) tol += m2::kBf16Out * (std::abs(y_ref[i]) + tol);
        ASSERT_LE(std::abs(yb[b * HP + i] - y_ref[i]), tol)
            << "ordinary row " << b << " (slot " << slot << ", h " << q.cursor.h << ") output "
            << i << ": got " << yb[b * HP + i] << ", want " << y_ref[i];
      }
    }
  }
  EXPECT_GT(flush_rows, 0);
  EXPECT_GT(ordinary_rows, 0);
  EXPECT_TRUE(ref_pool.guards_intact() && split.guards_intact() && copy.guards_intact() &&
              sb.guards_intact() && layer.guards_intact())
      << "guard bytes";
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

TEST(Mamba2CudaQuantModes, MisshapenOrMisalignedCopiesAreRejected) {
  RSSM_SKIP_WITHOUT_CUDA();
  Rng rng(test_seed(16005));
  m2::Options o;
  const Params prm(kSmall, o, rng);
  DevLayer layer(prm);
  const RingConfig cfg{4, 1, RingMode::kDecode};
  DevPool pool(kSmall, 3, 4, kF32, kF32, rng);
  DevCopy copy(StateFormat::kNvfp4, 3, kSmall);
  DeviceBuffer wrong(kU8, {3, kSmall.H, kSmall.P, kSmall.N / 8}, 74);
  DevStep st(prm, 1);
  st.put({nullptr}, {-1});
  auto run = [&](const StateBuffer& read) {
    mamba2::Cache c = pool.cache();
    c.mode = parse_state_mode("fp32/nvfp4");
    c.read = read;
    mamba2::replay_step(layer.layer, c, pool.cursors(cfg), st.tokens(), st.rows(-1), st.y.view());
  };
  StateBuffer bad = copy.buffer();
  bad.scales.blocks = wrong.view();
  try {
    run(bad);
    FAIL() << "a block-scale tensor of the wrong shape was accepted";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("scales.blocks"), std::string::npos) << e.what();
  }
  StateBuffer shifted = copy.buffer();
  shifted.values.data = static_cast<uint8_t*>(shifted.values.data) + 1;
  try {
    run(shifted);
    FAIL() << "a read copy off 16-byte alignment was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("aligned"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(copy.guards_intact() && pool.guards_intact());
}

}  // namespace
}  // namespace replayssm::testing::cuda_test
#endif  // RSSM_WITH_CUDA
