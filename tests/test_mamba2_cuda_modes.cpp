// Split state modes fp32/bf16 and fp32/fp16 on the CUDA Mamba-2 replay step (precision.h): two
// pools decode the same token streams through the public API, one in fp32/fp32, one in the split
// mode, over many flushes. What the split mode promises, checked after every step:
//   - nothing read from the 16-bit copy enters the recurrence: the fp32 checkpoints of the two
//     pools are equal bit for bit (a flush folds only ring inputs, with the same kernel code);
//   - the read copy is the checkpoint rounded to nearest even, element for element;
//   - flush rows' outputs equal the fp32/fp32 ones bit for bit; ordinary rows' outputs differ only
//     by reading the rounded copy: |dy| <= 2 u16 * sum_n |S0| |C| * |abar| + output rounding,
//     bounded here by 4 u16 max|y| + 4 u16 (the states are O(1)) — far below any real divergence;
//   - pad rows give y = 0; slots outside the batch (checkpoint and copy) are untouched; guards.
// Skipped without a CUDA device.
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_test_util.h"
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
  DevLayer layer(prm);
  const RingConfig cfg{L, 1, RingMode::kDecode};
  const int64_t slots = 9;
  DevPool ref_pool(shape, slots, L, kF32, in, rng), split(shape, slots, L, kF32, in, rng);
  const DType rd = read == StateFormat::kBf16 ? kBF16 : kF16;
  DeviceBuffer copy(rd, {slots, shape.H, shape.P, shape.N}, 97);
  auto split_cache = [&] {
    mamba2::Cache c = split.cache();
    c.mode = mode;
    c.read.values = copy.view();
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
  const int64_t n = shape.H * shape.P * shape.N, HP = shape.H * shape.P;
  const int64_t batch = 6;  // 4 sequences (some steps: pads instead) and 2 pad rows
  DevStep sa(prm, batch), sb(prm, batch);
  DeviceBuffer acc(DType::kI32, {batch}, 96);
  const double u16 = read == StateFormat::kBf16 ? 0x1p-8 : 0x1p-11;
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
    const std::vector<uint8_t> flush_before = split.flush.download();
    const std::vector<uint8_t> S_before = split.state.download(), C_before = copy.download();
    mamba2::Cache ca = ref_pool.cache(), cb = split_cache();
    mamba2::replay_step(layer.layer, ca, ref_pool.cursors(cfg), sa.tokens(), sa.rows(-1), sa.y.view());
    mamba2::replay_step(layer.layer, cb, split.cursors(cfg), sb.tokens(), sb.rows(-1), sb.y.view());
    for (DevPool* p : {&ref_pool, &split}) {
      RingCursors cur = p->cursors(cfg);
      replayssm::commit(cur, sb.rows(-1), acc.view());
    }
    cuda::device_synchronize();
    const std::vector<uint8_t> Sa = ref_pool.state.download(), Sb = split.state.download();
    for (int32_t slot : owned)
      ASSERT_EQ(std::memcmp(Sa.data() + slot * n * 4, Sb.data() + slot * n * 4, n * 4), 0)
          << "the fp32 checkpoints of slot " << slot
          << " differ: the read copy entered the recurrence";
    const std::vector<double> S = split.state.values(), Cv = copy.values();
    for (int32_t slot : owned)
      for (int64_t i = slot * n; i < (slot + 1) * n; ++i)
        ASSERT_EQ(Cv[i], round_to(rd, S[i])) << "read copy element " << i - slot * n << " of slot "
                                             << slot << " is not the rounded checkpoint";
    const std::vector<uint8_t> C_after = copy.download();
    const size_t es = dtype_size(rd);
    for (int32_t slot = 0; slot < slots; ++slot) {
      bool in_batch = false;
      for (int32_t id : ids) in_batch |= id == slot;
      if (in_batch) continue;
      const size_t off = static_cast<size_t>(slot * n);
      ASSERT_EQ(std::memcmp(S_before.data() + off * 4, Sb.data() + off * 4, n * 4), 0)
          << "checkpoint of slot " << slot << " (not in the batch) changed";
      ASSERT_EQ(std::memcmp(C_before.data() + off * es, C_after.data() + off * es, n * es), 0)
          << "read copy of slot " << slot << " (not in the batch) changed";
    }
    const std::vector<double> ya = sa.y.values(), yb = sb.y.values();
    double scale = 0.0;
    for (double v : ya) scale = std::max(scale, std::abs(v));
    for (int64_t b = 0; b < batch; ++b) {
      if (order[b] < 0) {
        for (int64_t i = 0; i < HP; ++i) ASSERT_EQ(yb[b * HP + i], 0.0) << "pad row " << b;
        continue;
      }
      const bool flush = flush_before[ids[b]] != 0;
      (flush ? flush_rows : ordinary_rows) += 1;
      for (int64_t i = 0; i < HP; ++i) {
        const double d = std::abs(ya[b * HP + i] - yb[b * HP + i]);
        if (flush)
          ASSERT_EQ(d, 0.0) << "flush row " << b << " output " << i << " differs from fp32/fp32";
        else
          ASSERT_LE(d, 4 * u16 * scale + 4 * u16 + (in == kBF16 ? 0x1p-7 * scale : 0.0))
              << "ordinary row " << b << " output " << i;
      }
    }
  }
  EXPECT_GT(flush_rows, 0);
  EXPECT_GT(ordinary_rows, 0);
  EXPECT_TRUE(ref_pool.guards_intact() && split.guards_intact() && copy.guards_intact() &&
              sb.guards_intact() && layer.guards_intact())
      << "guard bytes";
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
  c.mode = parse_state_mode("fp16sr/nvfp4");  // an fp16sr checkpoint is not built for CUDA
  c.read.values = copy.view();
  try {
    mamba2::replay_step(layer.layer, c, pool.cursors(cfg), st.tokens(), st.rows(-1), st.y.view());
    FAIL() << "fp16sr/nvfp4 ran on CUDA";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("fp16sr/nvfp4"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace replayssm::testing::cuda_test
#endif  // RSSM_WITH_CUDA
