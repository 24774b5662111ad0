// GPU invariants of the CUDA Mamba-2 decode kernels (DESIGN.md §3): L = 1 replay is bit-identical
// to the conventional kernel; repeated launches are bit-identical; one captured CUDA graph serves
// every mix of flush and ordinary rows; bad arguments raise typed errors and touch nothing;
// unchecked out-of-range ids are pad rows. Skipped (with the reason) without a CUDA device.
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <climits>
#include <string>
#include <vector>

#include "cuda/mamba2/mamba2_cuda.h"
#include "cuda_test_util.h"
#include "replayssm/errors.h"
#include "replayssm/mamba2.h"
#include "replayssm/ring.h"

namespace replayssm::testing::cuda_test {
namespace {

namespace cm = ::replayssm::cuda::mamba2;
using m2::Params;
using m2::Shape;
constexpr DType kF32 = DType::kF32, kF16 = DType::kF16, kBF16 = DType::kBF16;
constexpr Shape kTiny{4, 16, 64, 2, "tiny 4x16x64 g2"};
constexpr Shape kOdd{24, 48, 64, 3, "odd 24x48x64 g3"};

m2::Options opts(DType in, bool z = true) {
  m2::Options o;
  o.dtype = in;
  o.z = z;
  return o;
}

/// Rows: the given slots in random order with `pads` pad rows; tokens for the real rows.
struct Batch {
  std::vector<int32_t> ids;
  std::vector<ref::Mamba2Token> toks;
  std::vector<const ref::Mamba2Token*> ptrs;
  Batch(const Params& prm, Rng& rng, std::vector<int32_t> slots, int pads, int32_t pad_id) {
    for (int i = 0; i < pads; ++i) slots.push_back(pad_id);
    rng.shuffle(slots);
    ids = slots;
    toks.resize(ids.size());
    ptrs.assign(ids.size(), nullptr);
    for (size_t b = 0; b < ids.size(); ++b)
      if (ids[b] != pad_id) toks[b] = prm.token(rng), ptrs[b] = &toks[b];
  }
  int64_t size() const { return static_cast<int64_t>(ids.size()); }
};

std::vector<int32_t> first_slots(int n, int stride) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(i * stride + 1);
  return v;
}

void reset(DevPool& pool, const RingConfig& cfg, const std::vector<int32_t>& slots) {
  DeviceBuffer ids(DType::kI32, {static_cast<int64_t>(slots.size())}, 91);
  ids.set_values(std::vector<double>(slots.begin(), slots.end()));
  Rows rows;
  rows.slot_ids = ids.view();
  mamba2::Cache cache = pool.cache();
  mamba2::reset_slots(cache, rows);
  RingCursors cur = pool.cursors(cfg);
  replayssm::reset(cur, rows);
  cuda::device_synchronize();
}

void commit_all(DevPool& pool, const RingConfig& cfg, const DevStep& st, const Batch& batch,
                int32_t pad_id, void* stream = nullptr) {
  std::vector<double> acc(batch.ids.size());
  for (size_t b = 0; b < acc.size(); ++b) acc[b] = batch.ids[b] == pad_id ? 0 : 1;
  DeviceBuffer a(DType::kI32, {batch.size()}, 92);
  a.set_values(acc);
  RingCursors cur = pool.cursors(cfg);
  Rows rows = st.rows(pad_id);
  rows.stream = stream;
  replayssm::commit(cur, rows, a.view());
}

// ---- L = 1: every step a flush with no history = the conventional step, bit for bit
// --------------

TEST(Mamba2CudaInvariants, ReplayAtL1IsBitIdenticalToConventional) {
  RSSM_SKIP_WITHOUT_CUDA();
  const uint64_t seed = test_seed(3001);
  SCOPED_TRACE("seed " + std::to_string(seed));
  struct Combo {
    Shape shape;
    DType in, state, ring;
  };
  const Combo combos[] = {{kTiny, kF32, kF32, kF32},       {kTiny, kBF16, kF32, kBF16},
                          {kTiny, kF32, kF16, kF32},       {kTiny, kBF16, kBF16, kF32},
                          {kOdd, kBF16, kF32, kBF16},      {m2::kNano, kBF16, kF32, kBF16},
                          {m2::kSuper, kBF16, kF16, kBF16}};
  for (const Combo& cb : combos)
    for (cm::Route route : {cm::Route::kOutputOnly, cm::Route::kStateAndOutput})
      for (int prefetch : {0, 1})
        for (int v = 0; v < 3; ++v) {  // the dispatcher's plan, 8 rows per thread, 2 heads/block
          const int rpt = v == 1 ? 8 : 0, hpb = v == 2 ? 2 : 0;
          if (rpt == 8 && cb.state != kF32) continue;
          SCOPED_TRACE(std::string(cb.shape.name) + ", in " + dtype_name(cb.in) + ", state " +
                       dtype_name(cb.state) + ", ring " + dtype_name(cb.ring) + ", route " +
                       cm::route_name(route) + ", prefetch " + std::to_string(prefetch) +
                       ", rows/thread " + std::to_string(rpt) + ", heads/block " +
                       std::to_string(hpb));
          Rng rng(seed);
          const Params prm(cb.shape, opts(cb.in), rng);
          DevLayer layer(prm);
          const RingConfig cfg{1, 1, RingMode::kDecode};
          DevPool conv(cb.shape, 9, 1, cb.state, cb.ring, rng);
          DevPool rep(cb.shape, 9, 1, cb.state, cb.ring, rng);
          const std::vector<int32_t> slots = first_slots(3, 2);
          rep.restore(conv.snapshot());  // the same (garbage) states: a conventional step uses them
          {
            DeviceBuffer ids(DType::kI32, {3}, 93);
            ids.set_values(std::vector<double>(slots.begin(), slots.end()));
            Rows rows;
            rows.slot_ids = ids.view();
            RingCursors cur = rep.cursors(cfg);
            replayssm::reset(cur, rows);  // cursors only: h = 0, is_flush = 1
            cuda::device_synchronize();
          }
          cm::Plan plan;
          plan.route = route, plan.prefetch_ring = prefetch, plan.rows_per_thread = rpt;
          plan.heads_per_block = hpb;
          for (int step = 0; step < 3; ++step) {
            const Batch batch(prm, rng, slots, 2, -1);
            DevStep a(prm, batch.size()), b(prm, batch.size());
            a.put(batch.ptrs, batch.ids), b.put(batch.ptrs, batch.ids);
            a.y.poison(), b.y.poison();
            mamba2::Cache ca = conv.cache(), cr = rep.cache();
            cm::conventional_step(layer.layer, ca, a.tokens(), a.rows(-1), a.y.view());
            cm::replay_step(layer.layer, cr, rep.cursors(cfg), b.tokens(), b.rows(-1), b.y.view(),
                            plan);
            cuda::device_synchronize();
            EXPECT_TRUE(a.y.download() == b.y.download()) << "y differs at step " << step;
            EXPECT_TRUE(conv.state.download() == rep.state.download())
                << "state differs at step " << step;
            commit_all(rep, cfg, b, batch, -1);
            cuda::device_synchronize();
            if (HasFailure()) return;
          }
        }
}

// ---- determinism
// ---------------------------------------------------------------------------------

/// Random valid cursors in every slot (rings and checkpoints hold finite garbage): every h, and
/// besides the decode rule's flush at h = L - 1 a fraction `early` of early flushes (a flush may
/// fold any h + 1 records), so that flush and ordinary rows mix at every h.
void randomize_cursors(DevPool& pool, Rng& rng, int L, double early) {
  std::vector<double> o(pool.slots), h(pool.slots), f(pool.slots);
  for (int64_t s = 0; s < pool.slots; ++s) {
    o[s] = static_cast<double>(rng.integer(0, L - 1));
    h[s] = static_cast<double>(rng.integer(0, L - 1));
    f[s] = h[s] == L - 1 || rng.uniform(0, 1) < early ? 1 : 0;
  }
  pool.origin.set_values(o), pool.h.set_values(h), pool.flush.set_values(f);
}

TEST(Mamba2CudaInvariants, RepeatedLaunchesAreBitIdentical) {
  RSSM_SKIP_WITHOUT_CUDA();
  const uint64_t seed = test_seed(3002);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const Shape& sh : {m2::kNano, kOdd}) {
    SCOPED_TRACE(sh.name);
    Rng rng(seed);
    const Params prm(sh, opts(kBF16, false), rng);
    DevLayer layer(prm);
    const int L = 16;
    const RingConfig cfg{L, 1, RingMode::kDecode};
    DevPool pool(sh, 20, L, kF32, kBF16, rng), start(sh, 20, L, kF32, kBF16, rng);
    randomize_cursors(pool, rng, L, 0.2);
    start.copy_from(pool);
    std::vector<int32_t> slots;
    for (int i = 0; i < 16; ++i) slots.push_back(i + 3);
    const Batch batch(prm, rng, slots, 4, -1);
    DevStep st(prm, batch.size());
    st.put(batch.ptrs, batch.ids);
    struct Variant {
      const char* name;
      bool conventional;
      cm::Plan plan;
    };
    std::vector<Variant> variants = {{"conventional", true, {}}, {"replay auto", false, {}}};
    for (cm::Route r : {cm::Route::kOutputOnly, cm::Route::kStateAndOutput})
      for (int prefetch : {0, 1})
        for (int rpt : {4, 8})  // 8: the large-batch fp32 kernel
          for (int hpb : {1, 4}) {
            cm::Plan p;
            p.route = r, p.prefetch_ring = prefetch, p.rows_per_thread = rpt;
            p.heads_per_block = hpb;
            variants.push_back({cm::route_name(r), false, p});
          }
    for (const Variant& v : variants) {
      SCOPED_TRACE(std::string(v.name) + ", rows/thread " + std::to_string(v.plan.rows_per_thread) +
                   ", heads/block " + std::to_string(v.plan.heads_per_block) + ", prefetch " +
                   std::to_string(v.plan.prefetch_ring));
      std::vector<uint8_t> y0;
      DevPool::Snapshot p0;
      for (int rep = 0; rep < 3; ++rep) {
        pool.copy_from(start);
        st.y.poison();
        mamba2::Cache cache = pool.cache();
        if (v.conventional)
          cm::conventional_step(layer.layer, cache, st.tokens(), st.rows(-1), st.y.view(), v.plan);
        else
          cm::replay_step(layer.layer, cache, pool.cursors(cfg), st.tokens(), st.rows(-1),
                          st.y.view(), v.plan);
        cuda::device_synchronize();
        if (rep == 0) {
          y0 = st.y.download(), p0 = pool.snapshot();
          continue;
        }
        EXPECT_TRUE(st.y.download() == y0) << "y differs in launch " << rep;
        EXPECT_TRUE(pool.snapshot() == p0) << "pool differs in launch " << rep;
      }
      if (HasFailure()) return;
    }
  }
}

// ---- the flush kernel (flush.cuh) folds exactly as the group kernel's in-launch fold
// -------------

TEST(Mamba2CudaInvariants, FlushKernelIsBitIdenticalToTheInLaunchFold) {
  RSSM_SKIP_WITHOUT_CUDA();
  const uint64_t seed = test_seed(3004);
  SCOPED_TRACE("seed " + std::to_string(seed));
  struct Combo {
    Shape shape;
    DType in, state, ring;
    int L;
  };
  const Combo combos[] = {{kTiny, kF32, kF32, kF32, 4},     {kTiny, kBF16, kBF16, kF32, 16},
                          {kOdd, kBF16, kF32, kBF16, 8},    {kOdd, kF32, kF16, kF32, 64},
                          {m2::kNano, kBF16, kF32, kBF16, 16}, {m2::kSuper, kBF16, kF16, kBF16, 16}};
  for (const Combo& cb : combos)
    for (int rpt : {4, 8})
      for (int hpb : {0, 2}) {
        if (rpt == 8 && cb.state != kF32) continue;
        SCOPED_TRACE(std::string(cb.shape.name) + ", in " + dtype_name(cb.in) + ", state " +
                     dtype_name(cb.state) + ", ring " + dtype_name(cb.ring) + ", L " +
                     std::to_string(cb.L) + ", rows/thread " + std::to_string(rpt) +
                     ", heads/block " + std::to_string(hpb));
        Rng rng(seed);
        const Params prm(cb.shape, opts(cb.in), rng);
        DevLayer layer(prm);
        const RingConfig cfg{cb.L, 1, RingMode::kDecode};
        DevPool pool(cb.shape, 24, cb.L, cb.state, cb.ring, rng);
        DevPool start(cb.shape, 24, cb.L, cb.state, cb.ring, rng);
        randomize_cursors(pool, rng, cb.L, 0.3);  // flush rows at every h, ordinary rows too
        start.copy_from(pool);
        std::vector<int32_t> slots;
        for (int i = 0; i < 18; ++i) slots.push_back(i + 4);
        const Batch batch(prm, rng, slots, 3, -1);
        DevStep st(prm, batch.size());
        st.put(batch.ptrs, batch.ids);
        // With early exit the flush launch may also overlap the ordinary one (Plan::overlap):
        // both ways must fold exactly as the one launch does.
        // flush_split > 0 cuts a head into pieces whose last one is shorter than the block's
        // rows (Nano-4B 80 rows at 8 per thread in 3: 32 + 32 + 16; the odd shape's 48 in 2:
        // 32 + 16): the flush kernel's masks for rows past an item's end.
        const int partial_split = cb.shape.P == 80 ? 3 : cb.shape.P == 48 ? 2 : 0;
        for (int overlap : {0, 1})
          for (int fsplit : {0, partial_split}) {
            if (overlap == 1 && hpb != 2) continue;
            if (fsplit != 0 && (hpb != 0 || overlap != 0)) continue;
            SCOPED_TRACE("overlap " + std::to_string(overlap) + ", flush split " +
                         std::to_string(fsplit));
            expect_two_plans_bit_identical(pool, start, st, [&](int flush_kernel) {
              cm::Plan plan;
              plan.route = cm::Route::kOutputOnly, plan.rows_per_thread = rpt;
              plan.heads_per_block = hpb, plan.flush_kernel = flush_kernel;
              plan.early_exit = hpb == 2 ? 1 : 0;  // the ordinary launch's two ways to leave
              plan.overlap = overlap;
              plan.flush_split = fsplit;
              mamba2::Cache cache = pool.cache();
              cm::replay_step(layer.layer, cache, pool.cursors(cfg), st.tokens(), st.rows(-1),
                              st.y.view(), plan);
            });
            if (partial_split == 0) break;  // {0, 0}: once
          }
        EXPECT_TRUE(layer.guards_intact()) << "layer guard bytes overwritten";
        if (HasFailure()) return;
      }
}

// ---- CUDA graphs: the flush/ordinary decision is data
// ------------------------------------------------

TEST(Mamba2CudaInvariants, OneCapturedGraphServesEveryMixOfRows) {
  RSSM_SKIP_WITHOUT_CUDA();
  const uint64_t seed = test_seed(3003);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  const Params prm(kTiny, opts(kBF16), rng);
  DevLayer layer(prm);
  const int L = 4;
  const RingConfig cfg{L, 1, RingMode::kDecode};
  DevPool eager(kTiny, 16, L, kF32, kBF16, rng), graphed(kTiny, 16, L, kF32, kBF16, rng);
  randomize_cursors(eager, rng, L, 0.0);  // sequences at different h: flushes on different steps
  graphed.restore(eager.snapshot());
  const std::vector<int32_t> slots = first_slots(6, 2);
  const Batch shape_of_batch(prm, rng, slots, 2, -1);  // fixed row order and ids
  DevStep se(prm, shape_of_batch.size()), sg(prm, shape_of_batch.size());
  void* stream = cuda::stream_create();
  // Capture one step (replay + commit) with fixed buffers; host id checks are skipped while
  // capturing, the kernels read the ids and cursors on the device.
  std::vector<double> acc(shape_of_batch.ids.size());
  for (size_t b = 0; b < acc.size(); ++b) acc[b] = shape_of_batch.ids[b] == -1 ? 0 : 1;
  DeviceBuffer acc_g(DType::kI32, {shape_of_batch.size()}, 94);
  acc_g.set_values(acc);
  Rows rows_g = sg.rows(-1);
  rows_g.stream = stream;
  cuda::device_synchronize();
  cuda::begin_capture(stream);
  {
    mamba2::Cache cache = graphed.cache();
    RingCursors cur = graphed.cursors(cfg);
    cm::replay_step(layer.layer, cache, cur, sg.tokens(), rows_g, sg.y.view());
    replayssm::commit(cur, rows_g, acc_g.view());
  }
  void* graph = cuda::end_capture(stream);
  int flush_steps = 0;
  for (int step = 0; step < 4 * L; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    Batch batch = shape_of_batch;
    for (size_t b = 0; b < batch.ids.size(); ++b)
      if (batch.ids[b] != -1) batch.toks[b] = prm.token(rng), batch.ptrs[b] = &batch.toks[b];
    se.put(batch.ptrs, batch.ids), sg.put(batch.ptrs, batch.ids);
    se.y.poison(), sg.y.poison();
    const std::vector<uint8_t> flags = eager.flush.download();
    for (int32_t s : slots) flush_steps += flags[s];
    cuda::device_synchronize();
    mamba2::Cache cache = eager.cache();
    Rows rows_e = se.rows(-1);
    rows_e.stream = stream;
    cm::replay_step(layer.layer, cache, eager.cursors(cfg), se.tokens(), rows_e, se.y.view());
    commit_all(eager, cfg, se, batch, -1, stream);
    cuda::stream_synchronize(stream);
    cuda::graph_launch(graph, stream);
    cuda::stream_synchronize(stream);
    EXPECT_TRUE(se.y.download() == sg.y.download()) << "graph output differs from eager";
    EXPECT_TRUE(eager.snapshot() == graphed.snapshot()) << "graph pool differs from eager";
    if (HasFailure()) break;
  }
  EXPECT_GT(flush_steps, 0) << "no flush row was replayed";
  cuda::graph_destroy(graph);
  cuda::stream_destroy(stream);
}

// ---- errors
// --------------------------------------------------------------------------------------

TEST(Mamba2CudaErrors, BadArgumentsRaiseTypedErrorsAndTouchNothing) {
  RSSM_SKIP_WITHOUT_CUDA();
  Rng rng(test_seed(3004));
  const Params prm(kTiny, opts(kF32), rng);
  DevLayer layer(prm);
  const RingConfig cfg{4, 1, RingMode::kDecode};
  DevPool pool(kTiny, 8, 4, kF32, kF32, rng);
  reset(pool, cfg, {1, 3});
  const Batch batch(prm, rng, {1, 3}, 1, -1);
  DevStep st(prm, batch.size());
  st.put(batch.ptrs, batch.ids);
  st.y.poison();
  const DevPool::Snapshot snap = pool.snapshot();
  const std::vector<uint8_t> y0 = st.y.download();
  auto unchanged = [&](const char* what) {
    cuda::device_synchronize();
    EXPECT_TRUE(pool.snapshot() == snap) << what << ": the pool changed";
    EXPECT_TRUE(st.y.download() == y0) << what << ": y changed";
  };
  auto replay = [&](const mamba2::Cache& cache, const RingCursors& cur, const Rows& rows,
                    const cm::Plan& plan) {
    mamba2::Cache c = cache;
    cm::replay_step(layer.layer, c, cur, st.tokens(), rows, st.y.view(), plan);
  };
  const mamba2::Cache cache = pool.cache();
  const RingCursors cur = pool.cursors(cfg);
  const Rows rows = st.rows(-1);

  {  // a bf16 ring with float32 inputs would round the records
    DevPool bf(kTiny, 8, 4, kF32, kBF16, rng);
    EXPECT_THROW(replay(bf.cache(), bf.cursors(cfg), rows, {}), UnsupportedError);
  }
  {  // rings longer than 64
    const RingConfig big{65, 1, RingMode::kDecode};
    DevPool longp(kTiny, 8, 65, kF32, kF32, rng);
    EXPECT_THROW(replay(longp.cache(), longp.cursors(big), rows, {}), UnsupportedError);
  }
  {  // d_state not compiled
    const Shape s32{4, 16, 32, 2, "d_state 32"};
    Rng r2(1);
    const Params p32(s32, opts(kF32), r2);
    DevLayer l32(p32);
    DevPool p(s32, 8, 4, kF32, kF32, r2);
    DevStep s(p32, 1);
    mamba2::Cache c = p.cache();
    EXPECT_THROW(cm::replay_step(l32.layer, c, p.cursors(cfg), s.tokens(), s.rows(-1), s.y.view()),
                 UnsupportedError);
    EXPECT_THROW(cm::conventional_step(l32.layer, c, s.tokens(), s.rows(-1), s.y.view()),
                 UnsupportedError);
  }
  {  // misaligned checkpoint
    mamba2::Cache c = cache;
    c.state.data = static_cast<char*>(c.state.data) + 4;
    c.state.shape[0] -= 1;
    EXPECT_THROW(replay(c, cur, rows, {}), UnsupportedError);
  }
  {  // slot ids: duplicate, out of range, pad id inside the pool
    const ref::Mamba2Token tk = prm.token(rng);
    DevStep two(prm, 2);
    mamba2::Cache c = cache;
    two.put({&tk, &tk}, {1, 1});
    EXPECT_THROW(cm::replay_step(layer.layer, c, cur, two.tokens(), two.rows(-1), two.y.view()),
                 SlotError);
    two.put({&tk, &tk}, {1, 9});
    EXPECT_THROW(cm::replay_step(layer.layer, c, cur, two.tokens(), two.rows(-1), two.y.view()),
                 SlotError);
    EXPECT_THROW(cm::conventional_step(layer.layer, c, two.tokens(), two.rows(-1), two.y.view()),
                 SlotError);
    two.put({&tk, &tk}, {1, 3});
    EXPECT_THROW(cm::replay_step(layer.layer, c, cur, two.tokens(), two.rows(3), two.y.view()),
                 SlotError);
  }
  {  // forced plans the kernels cannot run
    cm::Plan p;
    p.heads_per_block = 3;  // 2 heads per group
    EXPECT_THROW(replay(cache, cur, rows, p), ConfigError);
    p = {};
    p.rows_per_thread = 6;  // the replay kernel holds 4 or 8 rows per thread
    EXPECT_THROW(replay(cache, cur, rows, p), ConfigError);
    p = {};
    p.rows_per_block = 17;  // P = 16
    EXPECT_THROW(replay(cache, cur, rows, p), ConfigError);
    p = {};
    p.overlap = 2;  // 0, 1 or -1 (auto)
    EXPECT_THROW(replay(cache, cur, rows, p), ConfigError);
    p = {};
    p.flush_split = -1;  // 0 (auto) .. headdim
    EXPECT_THROW(replay(cache, cur, rows, p), ConfigError);
    p.flush_split = 17;
    EXPECT_THROW(replay(cache, cur, rows, p), ConfigError);
    const ref::Mamba2Token tk = prm.token(rng);
    DevStep one(prm, 1);
    mamba2::Cache c = cache;
    one.put({&tk}, {1});
    p = {};
    p.rows_per_thread = 3;  // the conventional kernel holds 1, 2, 4 or 8 rows per thread
    EXPECT_THROW(cm::conventional_step(layer.layer, c, one.tokens(), one.rows(-1), one.y.view(), p),
                 ConfigError);
  }
  {  // a host tensor among device tensors
    mamba2::Cache c = cache;
    std::vector<float> host(static_cast<size_t>(8 * 4 * 4 * 16));
    c.ring_dt = make_view(host.data(), DType::kF32, {8, 4, 4});
    EXPECT_THROW(replay(c, cur, rows, {}), Error);
  }
  unchanged("after the rejected calls");
  EXPECT_TRUE(pool.guards_intact() && st.guards_intact());
}

TEST(Mamba2CudaErrors, UncheckedOutOfRangeIdsArePadRows) {
  RSSM_SKIP_WITHOUT_CUDA();
  Rng rng(test_seed(3005));
  const Params prm(kTiny, opts(kBF16), rng);
  DevLayer layer(prm);
  const RingConfig cfg{4, 1, RingMode::kDecode};
  DevPool pool(kTiny, 8, 4, kF32, kBF16, rng);
  reset(pool, cfg, {2});
  const ref::Mamba2Token t0 = prm.token(rng), t1 = prm.token(rng), t2 = prm.token(rng);
  DevStep st(prm, 3);
  st.put({&t0, &t1, &t2}, {-7, 2, 1 << 20});  // two ids outside [0, 8), none of them the pad id
  for (bool conventional : {false, true}) {
    st.y.poison();
    const DevPool::Snapshot snap = pool.snapshot();
    Rows rows = st.rows(-1);
    rows.check_device_ids = false;
    mamba2::Cache cache = pool.cache();
    if (conventional)
      cm::conventional_step(layer.layer, cache, st.tokens(), rows, st.y.view());
    else
      cm::replay_step(layer.layer, cache, pool.cursors(cfg), st.tokens(), rows, st.y.view());
    cuda::device_synchronize();
    const std::vector<double> y = st.y.values();
    const int64_t HP = kTiny.H * kTiny.P;
    for (int64_t i = 0; i < HP; ++i) {
      ASSERT_EQ(y[i], 0.0) << "row 0 (id -7)";
      ASSERT_EQ(y[2 * HP + i], 0.0) << "row 2 (id 2^20)";
      ASSERT_FALSE(std::isnan(y[HP + i])) << "row 1 (slot 2) not written";
    }
    const DevPool::Snapshot after = pool.snapshot();
    for (size_t k = 0; k < after.size(); ++k) {
      const size_t per = after[k].size() / 8;
      for (int32_t s = 0; s < 8; ++s) {
        if (s == 2) continue;
        EXPECT_EQ(std::memcmp(after[k].data() + s * per, snap[k].data() + s * per, per), 0)
            << "slot " << s << " changed (buffer " << k << ")";
      }
    }
    EXPECT_TRUE(pool.guards_intact() && st.guards_intact());
  }
}

}  // namespace
}  // namespace replayssm::testing::cuda_test

#else  // built without the CUDA backend

TEST(Mamba2CudaInvariants, SkippedWithoutCudaBackend) {
  GTEST_SKIP() << "built without the CUDA backend";
}

#endif  // RSSM_WITH_CUDA
