// GPU tests of gdn::verify on CUDA (GDN and KDA, the UT/WY chunk form in one launch) with the
// device commit: random walks (500 steps for the GDN and KDA main cases) with random T, random
// per-row draft lengths, random accepted counts and pad rows. Every step is checked against the
// fp64 oracle (ref::gdn_verify, itself checked to equal sequential decoding) started from what the
// GPU stored (checkpoint, ring, cursors downloaded before the step), with the CPU harness'
// tolerances (test_gdn_harness.h: per head, relative to the head's largest value): outputs, the
// tokens' ring records (u, k^, g), the flushed checkpoint; non-flush rows write no state, pad rows
// and columns past T_b are 0, cursors are only read, other slots untouched, guards intact. Also:
// one captured graph (verify + commit) equals eager launches bit for bit; bad counts are rejected.
// Skipped without a GPU.
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda/common/snapshot_select.h"
#include "test_gdn_cuda_util.h"

namespace replayssm::testing::gdn_cuda {
namespace {

using cuda_test::decode;

/// Device token buffers of one speculative step: [batch, T, ...].
struct DevTokensT {
  GpuCfg s;
  int64_t batch, T;
  DeviceBuffer q, k, v, a, b, y, ids, fed, acc;
  DevTokensT(const GpuCfg& c, int64_t batch_, int64_t T_)
      : s(c), batch(batch_), T(T_),
        q(c.dtype, {batch_, T_, c.shape.H, c.shape.K}, 181), k(c.dtype, {batch_, T_, c.shape.H, c.shape.K}, 182),
        v(c.dtype, {batch_, T_, c.shape.HV, c.shape.V}, 183),
        a(c.dtype, c.kda() ? std::vector<int64_t>{batch_, T_, c.shape.HV, c.shape.K}
                           : std::vector<int64_t>{batch_, T_, c.shape.HV}, 184),
        b(c.dtype, {batch_, T_, c.shape.HV}, 185), y(c.dtype, {batch_, T_, c.shape.HV, c.shape.V}, 186),
        ids(DType::kI32, {batch_}, 187), fed(DType::kI32, {batch_}, 188), acc(DType::kI32, {batch_}, 189) {}
  void put(const std::vector<std::vector<ref::GdnToken>>& toks, const std::vector<int32_t>& slot_ids,
           const std::vector<int32_t>& counts) {
    Vec vq(q.numel(), NAN), vk(k.numel(), NAN), vv(v.numel(), NAN), va(a.numel(), NAN), vb(b.numel(), NAN);
    auto place = [&](Vec& dst, const Vec& src, int64_t bs) {
      std::copy(src.begin(), src.end(), dst.begin() + bs * static_cast<int64_t>(src.size()));
    };
    for (int64_t r = 0; r < batch; ++r)
      for (size_t t = 0; t < toks[r].size(); ++t) {
        const int64_t bs = r * T + static_cast<int64_t>(t);
        place(vq, toks[r][t].q, bs), place(vk, toks[r][t].k, bs), place(vv, toks[r][t].v, bs);
        place(va, toks[r][t].a, bs), place(vb, toks[r][t].b, bs);
      }
    q.set_values(vq), k.set_values(vk), v.set_values(vv), a.set_values(va), b.set_values(vb);
    ids.set_values(Vec(slot_ids.begin(), slot_ids.end()));
    fed.set_values(Vec(counts.begin(), counts.end()));
  }
  gdn::Tokens tokens() const { return {q.view(), k.view(), v.view(), a.view(), b.view()}; }
  Rows rows(int32_t pad, bool with_counts) const {
    Rows r;
    r.slot_ids = ids.view();
    r.pad_slot_id = pad;
    if (with_counts) r.num_tokens = fed.view();
    return r;
  }
};

/// Random valid cursors (h <= L - T, the flush rule), checkpoints and rings for `slots`: ring k^
/// unit vectors and gates <= 0, as the kernels write them.
void random_start(DevPool& pool, const std::vector<int32_t>& slots, Rng& rng) {
  const RingConfig& cfg = pool.s.ring;
  for (int32_t s : slots) {
    Cursor c;
    c.origin = static_cast<int32_t>(rng.integer(0, cfg.rows() - 1));
    c.h = static_cast<int32_t>(rng.integer(0, cfg.L - cfg.T));
    c.is_flush = c.h + 2 * cfg.T > cfg.L;
    pool.set_cursor(s, c);
  }
  Vec st = pool.state.values(), u = pool.ring_u.values(), k = pool.ring_k.values(), g = pool.ring_g.values();
  for (double& e : st) e = rng.normal(0, 0.5);
  for (double& e : u) e = rng.normal(0, 0.5);
  const int64_t K = pool.s.shape.K;
  for (size_t i = 0; i < k.size(); i += K) {
    double n = 0;
    for (int64_t c = 0; c < K; ++c) n += (k[i + c] = rng.normal()) * k[i + c];
    for (int64_t c = 0; c < K; ++c) k[i + c] /= std::sqrt(n);
  }
  for (double& e : g) e = -rng.uniform(0.0005, 2.0);
  pool.state.set_values(st), pool.ring_u.set_values(u), pool.ring_k.set_values(k), pool.ring_g.set_values(g);
}

ref::GdnSeq seq_of(const DevPool& pool, const DevPool::Snapshot& snap, const Vec& u, const Vec& k,
                   const Vec& g, int32_t slot) {
  ref::GdnSeq q;
  const int64_t n = pool.state_per_slot();
  q.S0.resize(n);
  for (int64_t i = 0; i < n; ++i) q.S0[i] = decode(DType::kF32, snap[0].data(), slot * n + i);
  for (int64_t r = 0; r < pool.R; ++r) q.ring.push_back(pool.record(u, k, g, slot, r));
  q.cursor = pool.cursor(snap, slot);
  return q;
}

Vec slice(const Vec& v, int64_t off, int64_t n) { return Vec(v.begin() + off, v.begin() + off + n); }

struct WalkCase {
  Shape shape = kGpuSmall;
  Gate gate = Gate::kScalar;
  DType in = kF32;
  bool beta_bf16 = false;
  int L = 9, T = 4, seqs = 4, pads = 1, steps = 500;
  int64_t slots = 8;
};

void run_walk(const WalkCase& w, uint64_t seed) {
  GpuCfg c = make_setup(w.shape, w.gate, w.in, kF32, w.L, w.slots);
  c.ring = RingConfig{w.L, w.T, RingMode::kSpeculative};
  c.beta_bf16 = w.beta_bf16;
  SCOPED_TRACE(c.describe() + ", seed " + std::to_string(seed));
  Rng rng(seed);
  const DevLayer layer(c, rng);
  DevPool pool(c, c.ring.rows(), rng);
  const gdnt::Tolerance tol;
  const double out = w.in == kBF16 ? gdnt::kBf16Out : 0.0;
  const int64_t HV = c.shape.HV, V = c.shape.V, n = pool.state_per_slot(), batch = w.seqs + w.pads;
  std::vector<int32_t> seq_slots = pick_slots(rng, w.slots, w.seqs);
  random_start(pool, seq_slots, rng);
  int flushes = 0, partial = 0;
  for (int step = 0; step < w.steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<int32_t> ids(seq_slots);
    for (int i = 0; i < w.pads; ++i) ids.push_back(-1);
    rng.shuffle(ids);
    const int64_t Ty = rng.integer(1, w.T);
    const bool with_counts = rng.integer(0, 3) != 0;
    std::vector<int32_t> fed(batch);
    std::vector<std::vector<ref::GdnToken>> toks(batch);
    for (int64_t r = 0; r < batch; ++r) {
      fed[r] = with_counts ? static_cast<int32_t>(rng.integer(1, Ty)) : static_cast<int32_t>(Ty);
      if (ids[r] >= 0)
        for (int t = 0; t < fed[r]; ++t) toks[r].push_back(gdnt::random_token(rng, c));
    }
    DevTokensT dev(c, batch, Ty);
    dev.put(toks, ids, fed);
    dev.y.poison();
    const DevPool::Snapshot before = pool.snapshot();
    const Vec u0 = pool.ring_u.values(), k0 = pool.ring_k.values(), g0 = pool.ring_g.values();
    const Rows rows = dev.rows(-1, with_counts);
    gdn::Cache cache = pool.cache();
    gdn::verify(layer.layer, cache, pool.cursors(), dev.tokens(), rows, dev.y.view());
    const DevPool::Snapshot after = pool.snapshot();
    const Vec y = dev.y.values(), u1 = pool.ring_u.values(), k1 = pool.ring_k.values(),
              g1 = pool.ring_g.values();
    std::vector<bool> in_batch(w.slots, false);
    for (int64_t r = 0; r < batch; ++r) {
      for (int64_t t = 0; t < Ty; ++t) {
        if (ids[r] >= 0 && t < fed[r]) continue;
        for (int64_t i = 0; i < HV * V; ++i)
          ASSERT_EQ(y[(r * Ty + t) * HV * V + i], 0.0) << "row " << r << " token " << t;
      }
      if (ids[r] < 0) continue;
      const int32_t slot = ids[r];
      in_batch[slot] = true;
      ref::GdnSeq q = seq_of(pool, before, u0, k0, g0, slot);
      const Cursor cur = q.cursor;
      const std::vector<Vec> want = ref::gdn_verify(layer.ref, c.ring, q, toks[r]);
      for (int64_t t = 0; t < fed[r]; ++t) {
        const double e = gdnt::head_err(slice(y, (r * Ty + t) * HV * V, HV * V), want[t], HV);
        ASSERT_LE(e, tol.y + out) << "row " << r << " (slot " << slot << ", h " << cur.h << ", T_b "
                                  << fed[r] << ", flush " << cur.is_flush << ") token " << t;
        const int64_t row = ref::ring_row(cur, cur.h + t, c.ring);
        const ref::GdnRecord got = pool.record(u1, k1, g1, slot, row), &rec = q.ring[row];
        ASSERT_LE(gdnt::head_err(got.u, rec.u, HV), tol.u) << "ring u of token " << t;
        ASSERT_LE(gdnt::head_err(got.k, rec.k, c.shape.H), tol.key) << "ring k^ of token " << t;
        ASSERT_LE(gdnt::head_err(got.g, rec.g, HV), tol.gate) << "ring g of token " << t;
      }
      // The other ring rows (history and beyond the tokens) untouched.
      for (int64_t l = 0; l < c.ring.rows(); ++l) {
        if (l >= cur.h && l < cur.h + fed[r]) continue;
        const int64_t row = ref::ring_row(cur, l, c.ring);
        const ref::GdnRecord was = pool.record(u0, k0, g0, slot, row), is = pool.record(u1, k1, g1, slot, row);
        ASSERT_TRUE(was.u == is.u && was.k == is.k && was.g == is.g) << "ring row " << row << " changed";
      }
      const Vec S1 = slice(pool.state.values(), slot * n, n);
      if (cur.is_flush && cur.h > 0) {
        ++flushes;
        ASSERT_LE(gdnt::head_err(S1, q.S0, HV), tol.state) << "flushed checkpoint of slot " << slot;
      } else {
        ASSERT_EQ(std::vector<uint8_t>(after[0].begin() + slot * n * 4, after[0].begin() + (slot + 1) * n * 4),
                  std::vector<uint8_t>(before[0].begin() + slot * n * 4, before[0].begin() + (slot + 1) * n * 4))
            << "a row without a flush wrote the checkpoint";
      }
    }
    for (int i = 4; i < 7; ++i) ASSERT_EQ(after[i], before[i]) << "verify moved a cursor";
    for (int32_t s = 0; s < w.slots; ++s)
      if (!in_batch[s]) {
        ASSERT_EQ(pool.slot_diff(before, after, s), "");
      }
    std::vector<int32_t> acc(batch, 0);
    for (int64_t r = 0; r < batch; ++r) {
      if (ids[r] < 0) continue;
      const int kind = static_cast<int>(rng.integer(0, 2));
      acc[r] = kind == 0 ? fed[r] : kind == 1 ? 1 : static_cast<int32_t>(rng.integer(1, fed[r]));
      if (acc[r] < fed[r]) ++partial;
    }
    dev.acc.set_values(Vec(acc.begin(), acc.end()));
    RingCursors cursors = pool.cursors();
    replayssm::commit(cursors, rows, dev.acc.view());
    const DevPool::Snapshot moved = pool.snapshot();
    for (int64_t r = 0; r < batch; ++r) {
      if (ids[r] < 0) continue;
      ASSERT_EQ(pool.cursor(moved, ids[r]), commit_cursor(pool.cursor(before, ids[r]), acc[r], c.ring));
    }
    ASSERT_TRUE(pool.guards_intact() && layer.guards_intact() && dev.y.guards_intact() &&
                dev.q.guards_intact() && dev.a.guards_intact());
  }
  if (w.steps >= 100) {
    EXPECT_GT(flushes, w.steps / 20);
    EXPECT_GT(partial, w.steps / 4);
  }
}

TEST(GdnCudaVerify, RandomWalkGdnF32) {
  RSSM_SKIP_WITHOUT_CUDA();
  run_walk(WalkCase{}, test_seed(601));
}

TEST(GdnCudaVerify, RandomWalkKdaBf16T8) {
  RSSM_SKIP_WITHOUT_CUDA();
  WalkCase w;
  w.shape = kOdd, w.gate = Gate::kChannel, w.in = kBF16, w.L = 16, w.T = 8, w.steps = 500;
  w.beta_bf16 = true;
  run_walk(w, test_seed(602));
}

TEST(GdnCudaVerify, RandomWalkGdnBf16K128) {
  RSSM_SKIP_WITHOUT_CUDA();
  WalkCase w;
  w.shape = Shape{"gpu-k128", 2, 4, 128, 32}, w.in = kBF16, w.L = 12, w.T = 3, w.steps = 150;
  run_walk(w, test_seed(603));
}

// A ring longer than 32 records (KDA, T = 8).
TEST(GdnCudaVerify, RandomWalkRingLongerThan32) {
  RSSM_SKIP_WITHOUT_CUDA();
  WalkCase w;
  w.gate = Gate::kChannel, w.L = 40, w.T = 8, w.steps = 100;
  run_walk(w, test_seed(607));
}

// Limits of the CUDA kernels the public API cannot know, and a token axis of 0: typed errors.
TEST(GdnCudaVerify, CudaLimitsRaiseTypedErrors) {
  RSSM_SKIP_WITHOUT_CUDA();
  Rng rng(test_seed(608));
  auto run = [&](const GpuCfg& c, DevPool& pool, int64_t T, int32_t count) {
    const DevLayer layer(c, rng);
    DevTokensT dev(c, 1, T);
    std::vector<std::vector<ref::GdnToken>> toks(1);
    for (int64_t t = 0; t < T; ++t) toks[0].push_back(gdnt::random_token(rng, c));
    dev.put(toks, {1}, {count});
    gdn::Cache cache = pool.cache();
    gdn::verify(layer.layer, cache, pool.cursors(), dev.tokens(), dev.rows(-1, T > 0), dev.y.view());
  };
  GpuCfg c = make_setup(Shape{"v6", 2, 4, 64, 6}, Gate::kScalar, kF32, kF32, 8, 2);
  c.ring = RingConfig{8, 2, RingMode::kSpeculative};
  {
    DevPool pool(c, c.ring.rows(), rng);
    random_start(pool, {0, 1}, rng);
    EXPECT_THROW(run(c, pool, 2, 2), UnsupportedError);  // V = 6: not a multiple of 4
  }
  c = make_setup(kGpuSmall, Gate::kScalar, kF32, kF16, 8, 2);
  c.ring = RingConfig{8, 2, RingMode::kSpeculative};
  {
    DevPool pool(c, c.ring.rows(), rng);
    random_start(pool, {0, 1}, rng);
    EXPECT_THROW(run(c, pool, 2, 2), UnsupportedError);  // float16 checkpoint
  }
  c.state = kF32;
  DevPool pool(c, c.ring.rows(), rng);
  random_start(pool, {0, 1}, rng);
  const DevPool::Snapshot before = pool.snapshot();
  EXPECT_THROW(run(c, pool, 0, 1), ShapeError);  // no tokens
  pool.set_cursor(1, Cursor{0, c.ring.L - 1, true});  // no room for 2 tokens
  EXPECT_THROW(run(c, pool, 2, 2), SlotError);
  EXPECT_EQ(pool.snapshot()[0], before[0]);
  EXPECT_EQ(pool.snapshot()[1], before[1]);
}

// V = 192 gives the 8 warps 12 m-tiles, so that warps 0-3 load their second m-tile's first column
// groups ahead while finishing the first; K 128 (8 column groups) and 64 (4).
TEST(GdnCudaVerify, RandomWalkTwoMTilesPerWarp) {
  RSSM_SKIP_WITHOUT_CUDA();
  WalkCase w;
  w.shape = Shape{"v192-k128", 2, 4, 128, 192}, w.gate = Gate::kScalar, w.in = kBF16, w.L = 12,
  w.T = 4, w.steps = 60;
  run_walk(w, test_seed(609));
  w.shape = Shape{"v192-k64", 2, 2, 64, 192}, w.gate = Gate::kChannel, w.in = kF32, w.L = 16,
  w.T = 8, w.steps = 60;
  run_walk(w, test_seed(610));
  // KT = 8 stages two column groups per warp in shared memory; at V 192 the ring runs into the
  // warps' second m-tiles.
  w.shape = Shape{"v192-k128", 2, 4, 128, 192}, w.gate = Gate::kScalar, w.in = kBF16, w.L = 16,
  w.T = 8, w.steps = 60;
  run_walk(w, test_seed(611));
}

// KT = 8 without the shared-memory stage: at R = 64, V = K = 128 the stage (122,656 bytes per
// block against 106,272) would cost the second block per SM, so the host leaves it out and the
// kernel loads those column groups where they are used.
TEST(GdnCudaVerify, RandomWalkKt8WithoutStage) {
  RSSM_SKIP_WITHOUT_CUDA();
  WalkCase w;
  w.shape = Shape{"k128-v128", 2, 4, 128, 128}, w.gate = Gate::kScalar, w.in = kBF16, w.L = 64,
  w.T = 8, w.steps = 80;
  run_walk(w, test_seed(612));
}

TEST(GdnCudaVerify, RealShapesQwenAndKimi) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (const auto& [shape, gate] : {std::pair{kQwen4B, Gate::kScalar}, {kKimi, Gate::kChannel}}) {
    WalkCase w;
    w.shape = shape, w.gate = gate, w.in = kBF16, w.L = 16, w.T = 4, w.steps = 5;
    w.seqs = 2, w.pads = 1, w.slots = 3;
    run_walk(w, test_seed(604));
  }
}

TEST(GdnCudaVerify, CapturedGraphEqualsEagerAndBadCountsAreRejected) {
  RSSM_SKIP_WITHOUT_CUDA();
  GpuCfg c = make_setup(kGpuSmall, Gate::kChannel, kF32, kF32, 8, 6);
  c.ring = RingConfig{8, 3, RingMode::kSpeculative};
  Rng rng(test_seed(605));
  const DevLayer layer(c, rng);
  DevPool eager(c, c.ring.rows(), rng), graphed(c, c.ring.rows(), rng);
  random_start(eager, {0, 1, 2, 3, 4, 5}, rng);
  graphed.copy_from(eager);
  const int64_t batch = 5;
  DevTokensT dev(c, batch, c.ring.T);
  DeviceBuffer y_eager(kF32, {batch, c.ring.T, c.shape.HV, c.shape.V}, 190);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  auto enqueue = [&](DevPool& pool, TensorView y, bool checks) {
    Rows rows = dev.rows(-1, true);
    rows.stream = stream;
    rows.check_device_ids = checks;
    gdn::Cache cache = pool.cache();
    RingCursors cursors = pool.cursors();
    gdn::verify(layer.layer, cache, cursors, dev.tokens(), rows, y);
    replayssm::commit(cursors, rows, dev.acc.view());
  };
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  enqueue(graphed, dev.y.view(), false);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int step = 0; step < 40; ++step) {
    std::vector<int32_t> ids = {4, -1, 0, 2, 5};
    rng.shuffle(ids);
    std::vector<int32_t> fed(batch), acc(batch);
    std::vector<std::vector<ref::GdnToken>> toks(batch);
    for (int64_t r = 0; r < batch; ++r) {
      fed[r] = static_cast<int32_t>(rng.integer(1, c.ring.T));
      acc[r] = ids[r] < 0 ? 0 : static_cast<int32_t>(rng.integer(1, fed[r]));
      if (ids[r] >= 0)
        for (int t = 0; t < fed[r]; ++t) toks[r].push_back(gdnt::random_token(rng, c));
    }
    dev.put(toks, ids, fed);
    dev.acc.set_values(Vec(acc.begin(), acc.end()));
    enqueue(eager, y_eager.view(), true);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_EQ(y_eager.download(), dev.y.download()) << "step " << step;
    ASSERT_EQ(eager.snapshot(), graphed.snapshot()) << "step " << step;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  // Counts outside 1..T: SlotError before anything moves.
  const DevPool::Snapshot before = eager.snapshot();
  gdn::Cache cache = eager.cache();
  dev.put(std::vector<std::vector<ref::GdnToken>>(batch), {4, -1, 0, 2, 5}, {1, 1, 4, 1, 1});
  EXPECT_THROW(gdn::verify(layer.layer, cache, eager.cursors(), dev.tokens(), dev.rows(-1, true), dev.y.view()),
               SlotError);
  dev.put(std::vector<std::vector<ref::GdnToken>>(batch), {4, -1, 0, 2, 5}, {1, 1, 1, 1, 1});
  dev.acc.set_values({1, 0, 2, 1, 1});  // 2 > T_b = 1
  RingCursors cursors = eager.cursors();
  EXPECT_THROW(replayssm::commit(cursors, dev.rows(-1, true), dev.acc.view()), SlotError);
  EXPECT_EQ(eager.snapshot(), before);
}

// The peers' baseline: T_b sequential conventional steps, one state snapshot per token, against
// the oracle's conventional steps; the rollback picks the last accepted token's snapshot.
TEST(GdnCudaSnapshot, SequentialStepsWithOneSnapshotPerTokenMatchOracle) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (Gate gate : {Gate::kScalar, Gate::kChannel}) {
    GpuCfg c = make_setup(kOdd, gate, kBF16, kF32, 8, 1);
    SCOPED_TRACE(c.describe());
    Rng rng(test_seed(606));
    const DevLayer layer(c, rng);
    const gdnt::Tolerance tol;
    const int64_t T = 4, batch = 3, slots = 1 + batch * (T + 1), n = c.shape.HV * c.shape.V * c.shape.K;
    DeviceBuffer states(kF32, {slots, c.shape.HV, c.shape.V, c.shape.K}, 191);
    Vec st(states.numel());
    for (double& e : st) e = rng.normal(0, 0.5);
    states.set_values(st);
    st = states.values();  // as stored (float32)
    DevTokensT dev(c, batch, T);
    DeviceBuffer dst(DType::kI32, {batch, T}, 192), next(DType::kI32, {batch}, 193);
    const std::vector<int32_t> ids = {3, -1, 0}, fed = {4, 2, 2};
    Vec vdst(batch * T);
    for (int64_t r = 0; r < batch; ++r)
      for (int64_t t = 0; t < T; ++t) vdst[r * T + t] = static_cast<double>(4 + r * T + t);
    dst.set_values(vdst);
    std::vector<std::vector<ref::GdnToken>> toks(batch);
    for (int64_t r = 0; r < batch; ++r)
      if (ids[r] >= 0)
        for (int t = 0; t < fed[r]; ++t) toks[r].push_back(gdnt::random_token(rng, c));
    dev.put(toks, ids, fed);
    dev.y.poison();
    cg::snapshot_verify(layer.layer, states.view(), dev.tokens(), dev.rows(-1, true), dst.view(),
                        dev.y.view());
    const Vec y = dev.y.values(), after = states.values();
    const int64_t hvv = c.shape.HV * c.shape.V;
    for (int64_t r = 0; r < batch; ++r) {
      if (ids[r] < 0) {
        for (int64_t i = 0; i < T * hvv; ++i) ASSERT_EQ(y[r * T * hvv + i], 0.0);
        continue;
      }
      Vec S = slice(st, ids[r] * n, n);
      for (int64_t t = 0; t < T; ++t) {
        if (t >= fed[r]) {
          for (int64_t i = 0; i < hvv; ++i) ASSERT_EQ(y[(r * T + t) * hvv + i], 0.0);
          continue;
        }
        const Vec want = ref::gdn_conventional_step(layer.ref, S, toks[r][t]);
        EXPECT_LE(gdnt::head_err(slice(y, (r * T + t) * hvv, hvv), want, c.shape.HV),
                  tol.y + gdnt::kBf16Out) << "row " << r << " token " << t;
        EXPECT_LE(gdnt::head_err(slice(after, static_cast<int64_t>(vdst[r * T + t]) * n, n), S, c.shape.HV),
                  tol.state) << "snapshot of row " << r << " token " << t;
      }
    }
    std::vector<bool> written(slots, false);
    for (int64_t r = 0; r < batch; ++r)
      for (int64_t t = 0; t < fed[r] && ids[r] >= 0; ++t) written[static_cast<int64_t>(vdst[r * T + t])] = true;
    for (int64_t sl = 0; sl < slots; ++sl)
      if (!written[sl]) {
        EXPECT_EQ(slice(after, sl * n, n), slice(st, sl * n, n)) << "slot " << sl << " was written";
      }
    dev.acc.set_values({3, 0, 1});
    cuda::snapshot_select(dev.rows(-1, true), slots, dst.view(), dev.acc.view(), next.view());
    EXPECT_EQ(next.values(), (Vec{vdst[2], -1, vdst[2 * T]}));
    ASSERT_TRUE(states.guards_intact() && dev.y.guards_intact());
  }
}

}  // namespace
}  // namespace replayssm::testing::gdn_cuda

#else
TEST(GdnCudaVerify, SkippedWithoutCudaBackend) { GTEST_SKIP() << "built without the CUDA backend"; }
#endif
