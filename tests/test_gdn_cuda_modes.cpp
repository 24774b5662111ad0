// Split state modes fp32/bf16 and fp32/fp16 on the CUDA GDN/KDA replay step (precision.h): a
// split pool and an fp32/fp32 replay pool of the same L decode the same token streams through the
// public API over many flushes. The split flush recomputes every record's u from the fp32
// checkpoint and the ring's v and beta as the fp32 mode's ordinary steps computed it (flush.cuh),
// so, checked after every step:
//   - a flushed checkpoint equals the fp32 mode's bit for bit, and the flush row's output equals
//     the fp32 mode's bit for bit: nothing read from the 16-bit copy entered the recurrence;
//   - the read copy is the checkpoint rounded to nearest even, element for element;
//   - ordinary rows' outputs differ from the fp32 mode's only by reading the rounded copy (and
//     the u of earlier ordinary steps computed from it): within 2^-5 of the step's output scale
//     for bf16, 2^-8 for fp16 — far below a real divergence, far above fp32 noise;
//   - pad rows give y = 0; slots outside the batch keep their checkpoint and copy; guard bytes.
// Skipped without a CUDA device.
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "replayssm/errors.h"
#include "replayssm/gdn.h"
#include "replayssm/precision.h"
#include "test_gdn_cuda_util.h"

namespace replayssm::testing::gdn_cuda {
namespace {

void run_split(const Shape& shape, Gate gate, DType in, StateFormat read, int L, int steps,
               uint64_t seed) {
  const StateMode mode{StateFormat::kFp32, read, false};
  GpuCfg s = make_setup(shape, gate, in, kF32, L, 9);
  s.beta_bf16 = in == kBF16;
  SCOPED_TRACE(s.describe() + ", mode " + mode.name() + ", seed " + std::to_string(seed));
  Rng rng(seed);
  const DevLayer layer(s, rng);
  DevPool fp32(s, L, rng), split(s, L, rng);
  const Shape& sh = s.shape;
  const DType rd = read == StateFormat::kBf16 ? kBF16 : kF16;
  DeviceBuffer copy(rd, {s.slots, sh.HV, sh.V, sh.K}, 191);
  DeviceBuffer ring_v(kF32, {s.slots, sh.HV, L, sh.V}, 192), ring_beta(kF32, {s.slots, sh.HV, L}, 193);
  auto split_cache = [&] {
    gdn::Cache c = split.cache();
    c.mode = mode;
    c.read.values = copy.view();
    c.ring_v = ring_v.view();
    c.ring_beta = ring_beta.view();
    return c;
  };
  const std::vector<int32_t> owned{1, 3, 5, 7};  // slots 0, 2, 4, 6, 8 are never in a batch
  reset_slots(fp32, owned);
  {
    DeviceBuffer ids(DType::kI32, {4}, 178);
    ids.set_values(std::vector<double>(owned.begin(), owned.end()));
    Rows rows;
    rows.slot_ids = ids.view();
    gdn::Cache c = split_cache();
    gdn::reset_slots(c, rows);
    RingCursors cur = split.cursors();
    replayssm::reset(cur, rows);
    cuda::device_synchronize();
  }
  const int64_t n = sh.HV * sh.V * sh.K, HVV = sh.HV * sh.V;
  const double tol = read == StateFormat::kBf16 ? 0x1p-5 : 0x1p-8;
  int flush_rows = 0, ordinary_rows = 0;
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<int> order = cuda_test::split_walk_order(step, rng);
    const int64_t batch = static_cast<int64_t>(order.size());
    std::vector<ref::GdnToken> toks(batch);
    std::vector<const ref::GdnToken*> tp(batch, nullptr);
    std::vector<int32_t> ids(batch, -1);
    for (int64_t b = 0; b < batch; ++b)
      if (order[b] >= 0) toks[b] = gdnt::random_token(rng, s), tp[b] = &toks[b], ids[b] = owned[order[b]];
    DevStep sa(s, batch), sb(s, batch);
    sa.put(tp, ids), sb.put(tp, ids);
    sa.y.poison(), sb.y.poison();
    const std::vector<uint8_t> flush_before = split.flush.download();
    const std::vector<uint8_t> S_before = split.state.download(), C_before = copy.download();
    gdn::Cache ca = fp32.cache(), cb = split_cache();
    gdn::replay_step(layer.layer, ca, fp32.cursors(), sa.tokens(), sa.rows(-1), sa.y.view());
    gdn::replay_step(layer.layer, cb, split.cursors(), sb.tokens(), sb.rows(-1), sb.y.view());
    cuda::device_synchronize();
    commit_step(fp32, ids, -1);
    commit_step(split, ids, -1);
    const std::vector<uint8_t> Sa = fp32.state.download(), Sb = split.state.download();
    const std::vector<double> S = split.state.values(), Cv = copy.values();
    const std::vector<double> ya = sa.y.values(), yb = sb.y.values();
    double scale = 0.0;
    for (int64_t i = 0; i < batch * HVV; ++i)
      if (order[i / HVV] >= 0) scale = std::max(scale, std::abs(ya[i]));
    for (int64_t b = 0; b < batch; ++b) {
      if (order[b] < 0) {
        for (int64_t i = 0; i < HVV; ++i) ASSERT_EQ(yb[b * HVV + i], 0.0) << "pad row " << b;
        continue;
      }
      const int32_t slot = ids[b];
      const bool flush = flush_before[slot] != 0;
      (flush ? flush_rows : ordinary_rows) += 1;
      if (flush) {
        ASSERT_EQ(std::memcmp(Sa.data() + slot * n * 4, Sb.data() + slot * n * 4, n * 4), 0)
            << "row " << b << ": the flushed checkpoint differs from the fp32 mode's";
        for (int64_t i = slot * n; i < (slot + 1) * n; ++i)
          ASSERT_EQ(Cv[i], cuda_test::round_to(rd, S[i]))
              << "read copy element " << i - slot * n << " of slot " << slot;
      }
      for (int64_t i = 0; i < HVV; ++i) {
        const double d = std::abs(ya[b * HVV + i] - yb[b * HVV + i]);
        if (flush)
          ASSERT_EQ(d, 0.0) << "flush row " << b << " output " << i << " differs from the fp32 mode's";
        else
          ASSERT_LE(d, tol * scale + (in == kBF16 ? 0x1p-7 * scale : 0.0))
              << "ordinary row " << b << " output " << i << " (scale " << scale << ")";
      }
    }
    const size_t es = dtype_size(rd);
    const std::vector<uint8_t> C_after = copy.download();
    for (int32_t slot = 0; slot < s.slots; ++slot) {
      bool in_batch = false;
      for (int32_t id : ids) in_batch |= id == slot;
      if (in_batch) continue;
      ASSERT_EQ(std::memcmp(S_before.data() + slot * n * 4, Sb.data() + slot * n * 4, n * 4), 0)
          << "checkpoint of slot " << slot << " (not in the batch) changed";
      ASSERT_EQ(std::memcmp(C_before.data() + slot * n * es, C_after.data() + slot * n * es, n * es), 0)
          << "read copy of slot " << slot << " (not in the batch) changed";
    }
    ASSERT_TRUE(sb.guards_intact()) << "step buffers' guard bytes";
  }
  EXPECT_GT(flush_rows, 0);
  EXPECT_GT(ordinary_rows, 0);
  EXPECT_TRUE(fp32.guards_intact() && split.guards_intact() && copy.guards_intact() &&
              ring_v.guards_intact() && ring_beta.guards_intact() && layer.guards_intact())
      << "guard bytes";
}

TEST(GdnCudaModes, SplitSixteenBitReadCopiesFlushTheFp32Recurrence) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (Gate gate : {Gate::kScalar, Gate::kChannel})
    for (StateFormat read : {StateFormat::kBf16, StateFormat::kFp16}) {
      run_split(kGpuSmall, gate, kBF16, read, 4, 30, test_seed(16001));
      run_split(kOdd, gate, kF32, read, 8, 30, test_seed(16002));
      if (::testing::Test::HasFailure()) return;
    }
  run_split(kQwen4B, Gate::kScalar, kBF16, StateFormat::kBf16, 16, 36, test_seed(16003));
  run_split(kKimi, Gate::kChannel, kBF16, StateFormat::kBf16, 16, 36, test_seed(16004));
  run_split(kKimi, Gate::kChannel, kF32, StateFormat::kFp16, 8, 30, test_seed(16005));
  // L = 64: flushes with more than 17 records (the flush's u beyond its 16 registers, its pair
  // dots over more than one butterfly) and its largest shared memory.
  run_split(kQwen4B, Gate::kScalar, kBF16, StateFormat::kBf16, 64, 150, test_seed(16006));
  run_split(kKimi, Gate::kChannel, kBF16, StateFormat::kFp16, 64, 150, test_seed(16007));
}

}  // namespace
}  // namespace replayssm::testing::gdn_cuda
#endif  // RSSM_WITH_CUDA
