// Long GPU runs: >= 2,000 decode steps of the GDN/KDA replay kernel across hundreds of flushes,
// against the conventional kernel (float32 state) on the same token streams: outputs every step
// and the checkpoint after every flush. Small shape (the invariant is about many flushes, not
// size); four sequences with staggered starts, so flush and ordinary rows mix, and pad rows.
// Skipped without a CUDA device.
//
// Tolerance (errors per head, test_gdn_harness.h: max |a - b| / max(max |b|, 0.1)): both kernels
// are float32 evaluations of the same stream, each within the harness' derived 2e-4 of the exact
// recurrence over arbitrarily long runs (one-step rounding, forgotten as the gates decay and new
// keys overwrite a direction: the accumulated error stays ~4e-5), so they differ by at most
// 2 x 2e-4 = 4e-4; bfloat16 outputs add both roundings, 2 x 2^-8.
// A float16/bfloat16 checkpoint is rounded once per flush (relative 2^-11 / 2^-8, plus 2^-25
// absolute among float16 subnormals): here the conventional state is re-anchored to the stored
// checkpoint after each flush, so every window starts both kernels from the same state (outputs
// within 4e-4 again) and each flush must store the conventional state of the same token rounded
// once: 4e-4 + 2^-11 (2^-8) + 2^-25 / 0.1. Without re-anchoring a 16-bit recurrence drifts from
// the float32 one by design; bounding that is the precision modes' test, not this one.
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <cstdio>
#include <string>
#include <vector>

#include "test_gdn_cuda_util.h"

namespace replayssm::testing::gdn_cuda {
namespace {

using gdnt::head_err;

struct LongCase {
  Gate gate;
  DType in, state;
  int L;
  cg::Route route;
  int prefetch = 0;
  int bulk = 0;  ///< tile transport of both kernels
  int steps = 2000;
};

struct Stream {
  int32_t slot;
  int start;  ///< first step the sequence takes part in (desynchronises the flushes)
  Cursor cursor;
};

void run_long(const LongCase& lc, uint64_t seed) {
  GpuCfg s = make_setup(kGpuSmall, lc.gate, lc.in, lc.state, lc.L, 9);
  s.beta_bf16 = lc.in == kBF16;
  s.plan.route = lc.route, s.plan.prefetch_ring = lc.prefetch, s.plan.bulk_copy = lc.bulk;
  SCOPED_TRACE(s.describe() + ", seed " + std::to_string(seed));
  Rng rng(seed);
  const DevLayer layer(s, rng);
  GpuCfg sc = s;
  sc.state = kF32, sc.ring = RingConfig{1, 1, RingMode::kDecode};
  // Slots 1, 3, 5, 7 are used: a pool of 9 leaves unowned slots on both sides.
  DevPool conv(sc, 1, rng), rep(s, lc.L, rng);
  const int nseq = 4;
  std::vector<Stream> seqs;
  std::vector<int32_t> slots;
  for (int i = 0; i < nseq; ++i) {
    seqs.push_back({2 * i + 1, 3 * i, ref::reset(s.ring)});
    slots.push_back(2 * i + 1);
  }
  reset_slots(conv, slots);
  reset_slots(rep, slots);
  const DevPool::Snapshot unowned_conv = conv.snapshot(), unowned_rep = rep.snapshot();
  const bool anchor = lc.state != kF32;
  const double tol = 4e-4;
  const double tol_y = tol + (lc.in == kBF16 ? 2 * gdnt::kBf16Out : 0.0);
  const double tol_ckpt = tol + cuda_test::store_roundoff(lc.state) +
                          cuda_test::store_abs_roundoff(lc.state) / gdnt::kFloor;
  const int64_t batch = nseq + 1;  // every sequence (or a pad row before it starts) and a pad
  DevStep stc(s, batch), str(s, batch);
  const int64_t n = rep.state_per_slot(), HV = s.shape.HV;
  int64_t flushes = 0;
  double worst_y = 0.0, worst_ckpt = 0.0;
  for (int step = 0; step < lc.steps; ++step) {
    std::vector<int> order;  // sequence index per row, -1 = pad
    for (int i = 0; i < nseq; ++i) order.push_back(step >= seqs[i].start ? i : -1);
    order.push_back(-1);
    rng.shuffle(order);
    std::vector<ref::GdnToken> toks(batch);
    std::vector<const ref::GdnToken*> tp(batch, nullptr);
    std::vector<int32_t> ids(batch, s.pad);
    for (int64_t b = 0; b < batch; ++b)
      if (order[b] >= 0)
        toks[b] = gdnt::random_token(rng, s), tp[b] = &toks[b], ids[b] = seqs[order[b]].slot;
    for (DevStep* st : {&stc, &str}) {
      for (DeviceBuffer* buf : {&st->q, &st->k, &st->v, &st->a, &st->b}) buf->poison();
      st->put(tp, ids);
      st->y.poison();
    }
    gdn::Cache cc = conv.cache(), cr = rep.cache();
    cg::conventional_step(layer.layer, cc, stc.tokens(), stc.rows(s.pad), stc.y.view(), s.plan);
    cg::replay_step(layer.layer, cr, rep.cursors(), str.tokens(), str.rows(s.pad), str.y.view(),
                    s.plan);
    commit_step(rep, ids, s.pad);
    const std::vector<double> yc = stc.y.values(), yr = str.y.values();
    std::vector<double> Sc, Sr;  // downloaded on flush steps only
    for (int64_t b = 0; b < batch; ++b) {
      const Vec y_conv = stc.y_row(yc, b), y_rep = str.y_row(yr, b);
      if (order[b] < 0) {
        for (size_t i = 0; i < y_conv.size(); ++i)
          ASSERT_TRUE(y_conv[i] == 0.0 && y_rep[i] == 0.0) << "pad row, step " << step;
        continue;
      }
      Stream& q = seqs[order[b]];
      const double ey = head_err(y_rep, y_conv, HV);
      worst_y = std::max(worst_y, ey);
      ASSERT_LE(ey, tol_y) << "output at step " << step << ", slot " << q.slot << ", h "
                           << q.cursor.h << (q.cursor.is_flush ? " (flush)" : "");
      if (q.cursor.is_flush) {
        ++flushes;
        if (Sc.empty()) Sc = conv.state.values(), Sr = rep.state.values();
        const Vec s_conv(Sc.begin() + q.slot * n, Sc.begin() + (q.slot + 1) * n);
        const Vec s_rep(Sr.begin() + q.slot * n, Sr.begin() + (q.slot + 1) * n);
        const double es = head_err(s_rep, s_conv, HV);
        worst_ckpt = std::max(worst_ckpt, es);
        ASSERT_LE(es, anchor ? tol_ckpt : tol)
            << "checkpoint after the flush at step " << step << ", slot " << q.slot;
        if (anchor)  // the conventional state continues from the stored checkpoint
          std::copy(s_rep.begin(), s_rep.end(), Sc.begin() + q.slot * n);
      }
      q.cursor = ref::commit(q.cursor, 1, s.ring);
    }
    if (anchor && !Sc.empty()) conv.state.set_values(Sc);
  }
  const DevPool::Snapshot cursors = rep.snapshot();
  for (const Stream& q : seqs)
    EXPECT_EQ(rep.cursor(cursors, q.slot), q.cursor) << "device cursor of slot " << q.slot;
  EXPECT_GE(flushes, nseq * (lc.steps - 9) / lc.L - nseq) << "too few flushes crossed";
  // Slots nobody owns are bit-identical after every step (0, 2, 4, 6, 8).
  const DevPool::Snapshot end_conv = conv.snapshot(), end_rep = rep.snapshot();
  for (int32_t slot = 0; slot < 9; slot += 2) {
    EXPECT_EQ(conv.slot_diff(unowned_conv, end_conv, slot), "") << "conventional pool";
    EXPECT_EQ(rep.slot_diff(unowned_rep, end_rep, slot), "") << "replay pool";
  }
  EXPECT_TRUE(conv.guards_intact() && rep.guards_intact() && stc.guards_intact() &&
              str.guards_intact() && layer.guards_intact());
  std::printf("[ gdn cuda ] %s: %d steps, %lld flushes, max err y %.2e checkpoint %.2e\n",
              s.describe().c_str(), lc.steps, static_cast<long long>(flushes), worst_y, worst_ckpt);
}

TEST(GdnCudaLong, TwoThousandStepsAcrossFlushesEqualConventional) {
  RSSM_SKIP_WITHOUT_CUDA();
  const uint64_t seed = test_seed(14001);
  run_long({Gate::kScalar, kBF16, kF32, 8, cg::Route::kOutputOnly}, seed);
  run_long({Gate::kScalar, kF32, kF32, 5, cg::Route::kStateAndOutput, 1}, seed + 1);
  run_long({Gate::kChannel, kBF16, kF32, 16, cg::Route::kOutputOnly, 0, 1}, seed + 2);
  run_long({Gate::kChannel, kF32, kF32, 3, cg::Route::kStateAndOutput, 1, 1}, seed + 3);
}

TEST(GdnCudaLong, SixteenBitCheckpointsRoundOncePerFlushOverTwoThousandSteps) {
  RSSM_SKIP_WITHOUT_CUDA();
  const uint64_t seed = test_seed(14002);
  run_long({Gate::kScalar, kBF16, kF16, 16, cg::Route::kOutputOnly}, seed);
  run_long({Gate::kScalar, kBF16, kBF16, 16, cg::Route::kOutputOnly, 1}, seed + 1);
  run_long({Gate::kChannel, kBF16, kBF16, 8, cg::Route::kOutputOnly}, seed + 2);
  run_long({Gate::kChannel, kF32, kF16, 16, cg::Route::kStateAndOutput, 0, 1}, seed + 3);
}

}  // namespace
}  // namespace replayssm::testing::gdn_cuda

#else  // built without the CUDA backend

TEST(GdnCudaLong, SkippedWithoutCudaBackend) { GTEST_SKIP() << "built without the CUDA backend"; }

#endif  // RSSM_WITH_CUDA
