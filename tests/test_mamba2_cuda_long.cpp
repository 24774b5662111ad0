// Long GPU runs: >= 2,000 decode steps of the replay kernel across hundreds of flushes, against
// the conventional kernel on the same token streams, outputs every step and the checkpoint after
// every flush. Small shape (the invariant is about many flushes, not size). Skipped without a
// CUDA device.
//
// Tolerance (test_mamba2_util.h derives each term; units of u = 2^-24): both kernels are compared
// with the exact recurrence of the same stream. The conventional state carries the budget
// bconv <- a bconv + (32 + 10 |delta A|) M, the replay checkpoint bckpt <- abar bckpt + k M at
// every flush of a window of m records (k = m + 32 + kappa, kappa = |A| P (2m + 11)), where M is
// the magnitude state of the stream. A 16-bit checkpoint adds its rounding at every flush:
// bckpt += (u16 / u) M with u16 = 2^-11 (fp16) or 2^-8 (bf16), plus 2^-25 / u for fp16 values
// that land among its subnormals (below 2^-14 the spacing is fixed). The decays keep every budget
// bounded however long the run is. An output's error is then bounded by y_bound(budget, ...), so
// |y_replay - y_conventional| <= bound_replay + bound_conventional, plus both outputs' rounding
// (2^-8 |y| each for bf16 outputs); the checkpoint after a flush and the conventional state of
// the same token differ by at most u (bckpt + bconv) per element.
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <string>
#include <vector>

#include "cuda/mamba2/mamba2_cuda.h"
#include "cuda_test_util.h"
#include "replayssm/mamba2.h"
#include "replayssm/ring.h"

namespace replayssm::testing::cuda_test {
namespace {

namespace cm = ::replayssm::cuda::mamba2;
using m2::Params;
using m2::Shape;
using ref::Vec;
constexpr DType kF32 = DType::kF32, kF16 = DType::kF16, kBF16 = DType::kBF16;
constexpr double kU = m2::kU32;
constexpr Shape kTiny{4, 16, 64, 2, "tiny 4x16x64 g2"};

struct LongCase {
  DType in, state;
  int L;
  cm::Route route;
  int steps = 2000;
};

struct Stream {
  int32_t slot;
  int start;  ///< first step the sequence takes part in (desynchronises the flushes)
  Vec M, bconv, bckpt;
  std::vector<Vec> window;  ///< deltas of the records since the checkpoint
  Cursor cursor;
};

void run_long(const LongCase& lc, uint64_t seed) {
  SCOPED_TRACE(std::string("in ") + dtype_name(lc.in) + ", checkpoint " + dtype_name(lc.state) +
               ", L = " + std::to_string(lc.L) + ", route " + cm::route_name(lc.route) + ", seed " +
               std::to_string(seed));
  Rng rng(seed);
  m2::Options o;
  o.dtype = lc.in;
  const Params prm(kTiny, o, rng);
  DevLayer layer(prm);
  const RingConfig cfg{lc.L, 1, RingMode::kDecode};
  const DType ring = lc.in;  // bf16 inputs: bf16 ring
  // Slots 1, 3, 5, 7 are used: a pool of 9 leaves unowned slots on both sides.
  DevPool conv(kTiny, 9, 1, kF32, kF32, rng), rep(kTiny, 9, lc.L, lc.state, ring, rng);
  const int nseq = 4;
  std::vector<Stream> seqs;
  const int64_t n = kTiny.H * kTiny.P * kTiny.N, HP = kTiny.H * kTiny.P;
  {
    std::vector<double> ids;
    for (int i = 0; i < nseq; ++i) {
      seqs.push_back({static_cast<int32_t>(2 * i + 1),
                      3 * i,
                      Vec(n, 0.0),
                      Vec(n, 0.0),
                      Vec(n, 0.0),
                      {},
                      ref::reset(cfg)});
      ids.push_back(2 * i + 1);
    }
    DeviceBuffer idb(DType::kI32, {nseq}, 95);
    idb.set_values(ids);
    Rows rows;
    rows.slot_ids = idb.view();
    for (DevPool* p : {&conv, &rep}) {
      mamba2::Cache cache = p->cache();
      mamba2::reset_slots(cache, rows);
    }
    RingCursors cur = rep.cursors(cfg);
    replayssm::reset(cur, rows);
    cuda::device_synchronize();
  }
  const int64_t batch = nseq + 1;  // every sequence (or a pad row before it starts) and a pad
  DevStep sc(prm, batch), sr(prm, batch);
  DeviceBuffer acc(DType::kI32, {batch}, 96);
  const double u16 = store_roundoff(lc.state) / kU;
  const double u16_abs = store_abs_roundoff(lc.state) / kU;  // fp16 subnormals
  const double out_rel = lc.in == kBF16 ? 2 * m2::kBf16Out : 0.0;
  int64_t flushes = 0;
  cm::Plan plan;
  plan.route = lc.route;
  for (int step = 0; step < lc.steps; ++step) {
    std::vector<int> order;  // sequence index per row, -1 = pad
    for (int i = 0; i < nseq; ++i) order.push_back(step >= seqs[i].start ? i : -1);
    order.push_back(-1);
    rng.shuffle(order);
    std::vector<ref::Mamba2Token> toks(batch);
    std::vector<const ref::Mamba2Token*> tp(batch, nullptr);
    std::vector<int32_t> ids(batch, -1);
    std::vector<double> av(batch, 0.0);
    for (int64_t b = 0; b < batch; ++b)
      if (order[b] >= 0)
        toks[b] = prm.token(rng), tp[b] = &toks[b], ids[b] = seqs[order[b]].slot, av[b] = 1;
    for (DevStep* st : {&sc, &sr}) {
      for (DeviceBuffer* buf : {&st->x, &st->dt, &st->B, &st->C, &st->z}) buf->poison();
      st->put(tp, ids);
      st->y.poison();
    }
    acc.set_values(av);
    mamba2::Cache cc = conv.cache(), cr = rep.cache();
    cm::conventional_step(layer.layer, cc, sc.tokens(), sc.rows(-1), sc.y.view());
    cm::replay_step(layer.layer, cr, rep.cursors(cfg), sr.tokens(), sr.rows(-1), sr.y.view(), plan);
    RingCursors cur = rep.cursors(cfg);
    replayssm::commit(cur, sr.rows(-1), acc.view());
    cuda::device_synchronize();
    const std::vector<double> yc = sc.y.values(), yr = sr.y.values();
    std::vector<double> Sc, Sr;  // downloaded on flush steps only
    for (int64_t b = 0; b < batch; ++b) {
      if (order[b] < 0) {
        for (int64_t i = 0; i < HP; ++i)
          ASSERT_TRUE(yc[b * HP + i] == 0.0 && yr[b * HP + i] == 0.0) << "pad row, step " << step;
        continue;
      }
      Stream& q = seqs[order[b]];
      const ref::Mamba2Token& t = toks[b];
      Vec delta(kTiny.H);
      for (int64_t h = 0; h < kTiny.H; ++h) delta[h] = ref::mamba2_delta(prm.ref, t, h);
      m2::advance(prm, t, q.M, q.bconv);
      q.window.push_back(delta);
      std::vector<const Vec*> win;
      for (const Vec& d : q.window) win.push_back(&d);
      m2::Window w = m2::window_of(prm, win);
      const Vec y_conv(yc.begin() + b * HP, yc.begin() + (b + 1) * HP);
      const Vec y_rep(yr.begin() + b * HP, yr.begin() + (b + 1) * HP);
      Vec kr = w.k;
      for (double& k : kr) k += static_cast<double>(kTiny.N);
      const Vec br = m2::y_bound(prm, t, y_conv, q.bckpt, w.abar, q.M, kr, kU);
      const Vec bc = m2::y_bound(prm, t, y_conv, q.bconv, Vec(kTiny.H, 1.0), q.M,
                                 Vec(kTiny.H, kTiny.N + 4.0), kU);
      Vec bound(br.size());
      for (size_t i = 0; i < bound.size(); ++i) bound[i] = br[i] + bc[i];
      const std::string e = m2::within(y_rep, y_conv, bound, out_rel);
      ASSERT_EQ(e, "") << "output at step " << step << ", slot " << q.slot << ", h " << q.cursor.h
                       << (q.cursor.is_flush ? " (flush)" : "");
      if (q.cursor.is_flush) {
        ++flushes;
        for (int64_t h = 0; h < kTiny.H; ++h)
          for (int64_t i = h * kTiny.P * kTiny.N; i < (h + 1) * kTiny.P * kTiny.N; ++i)
            q.bckpt[i] = w.abar[h] * q.bckpt[i] + (w.k[h] + u16) * q.M[i] + u16_abs;
        q.window.clear();
        if (Sc.empty()) Sc = conv.state.values(), Sr = rep.state.values();
        Vec s_conv(Sc.begin() + conv.state_at(q.slot), Sc.begin() + conv.state_at(q.slot) + n);
        Vec s_rep(Sr.begin() + rep.state_at(q.slot), Sr.begin() + rep.state_at(q.slot) + n);
        Vec bs(n);
        for (int64_t i = 0; i < n; ++i) bs[i] = kU * (q.bckpt[i] + q.bconv[i]);
        ASSERT_EQ(m2::within(s_rep, s_conv, bs, 0.0), "")
            << "checkpoint after the flush at step " << step << ", slot " << q.slot;
      }
      q.cursor = ref::commit(q.cursor, 1, cfg);
    }
  }
  EXPECT_GE(flushes, nseq * (lc.steps - 9) / lc.L - nseq) << "too few flushes crossed";
  EXPECT_TRUE(conv.guards_intact() && rep.guards_intact() && sc.guards_intact() &&
              sr.guards_intact() && layer.guards_intact());
}

TEST(Mamba2CudaLong, TwoThousandStepsAcrossFlushesEqualConventional) {
  RSSM_SKIP_WITHOUT_CUDA();
  const uint64_t seed = test_seed(4001);
  run_long({kBF16, kF32, 8, cm::Route::kOutputOnly}, seed);
  run_long({kF32, kF32, 5, cm::Route::kStateAndOutput}, seed + 1);
}

TEST(Mamba2CudaLong, SixteenBitCheckpointsStayBoundedOverTwoThousandSteps) {
  RSSM_SKIP_WITHOUT_CUDA();
  const uint64_t seed = test_seed(4002);
  run_long({kBF16, kF16, 16, cm::Route::kOutputOnly}, seed);
  run_long({kBF16, kBF16, 16, cm::Route::kOutputOnly}, seed + 1);
}

}  // namespace
}  // namespace replayssm::testing::cuda_test

#else  // built without the CUDA backend

TEST(Mamba2CudaLong, SkippedWithoutCudaBackend) {
  GTEST_SKIP() << "built without the CUDA backend";
}

#endif  // RSSM_WITH_CUDA
