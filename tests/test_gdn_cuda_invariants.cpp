// GPU invariants of the CUDA GDN/KDA decode kernels (DESIGN.md §3): L = 1 replay is bit-identical
// to the conventional kernel; repeated launches are bit-identical; one captured CUDA graph serves
// every mix of flush and ordinary rows; bad arguments raise typed errors and touch nothing;
// unchecked out-of-range ids are pad rows. Skipped (with the reason) without a CUDA device.
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <climits>
#include <string>
#include <vector>

#include "replayssm/errors.h"
#include "test_gdn_cuda_util.h"

namespace replayssm::testing::gdn_cuda {
namespace {

/// Rows: the given slots in random order with `pads` pad rows; tokens for the real rows.
struct Batch {
  std::vector<int32_t> ids;
  std::vector<ref::GdnToken> toks;
  std::vector<const ref::GdnToken*> ptrs;
  Batch(const GpuCfg& s, Rng& rng, std::vector<int32_t> slots, int pads) {
    for (int i = 0; i < pads; ++i) slots.push_back(s.pad);
    rng.shuffle(slots);
    ids = slots;
    toks.resize(ids.size());
    ptrs.assign(ids.size(), nullptr);
    for (size_t b = 0; b < ids.size(); ++b)
      if (ids[b] != s.pad) toks[b] = gdnt::random_token(rng, s), ptrs[b] = &toks[b];
  }
  Batch(const Batch& o) : ids(o.ids), toks(o.toks), ptrs(o.ptrs.size(), nullptr) {
    for (size_t b = 0; b < ptrs.size(); ++b)
      if (o.ptrs[b]) ptrs[b] = &toks[b];
  }
  int64_t size() const { return static_cast<int64_t>(ids.size()); }
  /// New tokens for the same rows.
  void redraw(const GpuCfg& s, Rng& rng) {
    for (size_t b = 0; b < ids.size(); ++b)
      if (ids[b] != s.pad) toks[b] = gdnt::random_token(rng, s), ptrs[b] = &toks[b];
  }
};

std::vector<int32_t> spaced_slots(int n, int stride) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(i * stride + 1);
  return v;
}

/// Sane ring contents in every slot (u ~ N(0, 1), k^ components ~ N(0, 1/K), g in (-3, 0)) and
/// random valid cursors: every h, and besides the decode rule's flush at h = L - 1 a fraction
/// `early` of early flushes (a flush may fold any h + 1 records), so that flush and ordinary rows
/// mix at every h.
void randomize(DevPool& pool, Rng& rng, double early) {
  const int L = pool.s.ring.L;
  std::vector<double> u(pool.ring_u.numel()), k(pool.ring_k.numel()), g(pool.ring_g.numel());
  for (double& e : u) e = rng.normal();
  for (double& e : k) e = rng.normal(0.0, 1.0 / std::sqrt(static_cast<double>(pool.s.shape.K)));
  for (double& e : g) e = -rng.uniform(0.001, 3.0);
  pool.ring_u.set_values(u), pool.ring_k.set_values(k), pool.ring_g.set_values(g);
  std::vector<double> S(pool.state.numel());
  for (double& e : S) e = rng.normal();
  pool.state.set_values(S);
  std::vector<double> o(pool.slots), h(pool.slots), f(pool.slots);
  for (int64_t s = 0; s < pool.slots; ++s) {
    o[s] = static_cast<double>(rng.integer(0, L - 1));
    h[s] = static_cast<double>(rng.integer(0, L - 1));
    f[s] = h[s] == L - 1 || rng.uniform(0, 1) < early ? 1 : 0;
  }
  pool.origin.set_values(o), pool.h.set_values(h), pool.flush.set_values(f);
}

// ---- L = 1: every step a flush with no history = the conventional step, bit for bit ----------

TEST(GdnCudaInvariants, ReplayAtL1IsBitIdenticalToConventional) {
  RSSM_SKIP_WITHOUT_CUDA();
  const uint64_t seed = test_seed(13001);
  SCOPED_TRACE("seed " + std::to_string(seed));
  struct Combo {
    Shape shape;
    Gate gate;
    DType in, state;
  };
  const Combo combos[] = {
      {kGpuSmall, Gate::kScalar, kF32, kF32}, {kGpuSmall, Gate::kChannel, kBF16, kF32},
      {kGpuSmall, Gate::kScalar, kF32, kF16}, {kGpuSmall, Gate::kChannel, kBF16, kBF16},
      {kOdd, Gate::kScalar, kBF16, kF32},     {kOdd, Gate::kChannel, kF32, kF16},
      {kQwen4B, Gate::kScalar, kBF16, kF32},  {kKimi, Gate::kChannel, kBF16, kBF16}};
  for (const Combo& cb : combos)
    for (cg::Route route : {cg::Route::kOutputOnly, cg::Route::kStateAndOutput})
      for (int prefetch : {0, 1}) {
        GpuCfg s = make_setup(cb.shape, cb.gate, cb.in, cb.state, 1, 9);
        s.beta_bf16 = prefetch == 1;
        SCOPED_TRACE(s.describe() + ", replay route " + cg::route_name(route) + ", prefetch " +
                     std::to_string(prefetch));
        Rng rng(seed);
        const DevLayer layer(s, rng);
        DevPool conv(s, 1, rng), rep(s, 1, rng);
        const std::vector<int32_t> slots = spaced_slots(3, 2);
        rep.restore(conv.snapshot());  // the same (garbage) states: a conventional step uses them
        {
          DeviceBuffer ids(DType::kI32, {3}, 193);
          ids.set_values(std::vector<double>(slots.begin(), slots.end()));
          Rows rows;
          rows.slot_ids = ids.view();
          RingCursors cur = rep.cursors();
          replayssm::reset(cur, rows);  // cursors only: h = 0, is_flush = 1
          cuda::device_synchronize();
        }
        cg::Plan plan, conv_plan;  // the tile transports differ, the arithmetic must not
        plan.route = route, plan.prefetch_ring = prefetch, plan.bulk_copy = prefetch;
        conv_plan.bulk_copy = 1 - prefetch;
        for (int step = 0; step < 3; ++step) {
          const Batch batch(s, rng, slots, 2);
          DevStep a(s, batch.size()), b(s, batch.size());
          a.put(batch.ptrs, batch.ids), b.put(batch.ptrs, batch.ids);
          a.y.poison(), b.y.poison();
          gdn::Cache ca = conv.cache(), cr = rep.cache();
          cg::conventional_step(layer.layer, ca, a.tokens(), a.rows(s.pad), a.y.view(), conv_plan);
          cg::replay_step(layer.layer, cr, rep.cursors(), b.tokens(), b.rows(s.pad), b.y.view(),
                          plan);
          cuda::device_synchronize();
          EXPECT_TRUE(a.y.download() == b.y.download()) << "y differs at step " << step;
          EXPECT_TRUE(conv.state.download() == rep.state.download())
              << "state differs at step " << step;
          commit_step(rep, batch.ids, s.pad);
          if (HasFailure()) return;
        }
      }
}

// ---- determinism ------------------------------------------------------------------------------

TEST(GdnCudaInvariants, RepeatedLaunchesAreBitIdentical) {
  RSSM_SKIP_WITHOUT_CUDA();
  const uint64_t seed = test_seed(13002);
  SCOPED_TRACE("seed " + std::to_string(seed));
  struct ShapeGate {
    Shape shape;
    Gate gate;
  };
  for (const ShapeGate& sg : {ShapeGate{kQwen4B, Gate::kScalar}, ShapeGate{kOdd, Gate::kChannel},
                              ShapeGate{kGpuSmall, Gate::kChannel}}) {
    const int L = 16;
    GpuCfg s = make_setup(sg.shape, sg.gate, kBF16, kF32, L, 20);
    SCOPED_TRACE(s.describe());
    Rng rng(seed);
    const DevLayer layer(s, rng);
    DevPool pool(s, L, rng), start(s, L, rng);
    randomize(pool, rng, 0.2);
    start.copy_from(pool);
    std::vector<int32_t> slots;
    for (int i = 0; i < 16; ++i) slots.push_back(i + 3);
    const Batch batch(s, rng, slots, 4);
    DevStep st(s, batch.size());
    st.put(batch.ptrs, batch.ids);
    struct Variant {
      std::string name;
      bool conventional;
      cg::Plan plan;
    };
    cg::Plan bulk;
    bulk.bulk_copy = 1;
    std::vector<Variant> variants = {{"conventional", true, {}},
                                     {"conventional, bulk copies", true, bulk},
                                     {"replay auto", false, {}}};
    for (cg::Route r : {cg::Route::kOutputOnly, cg::Route::kStateAndOutput})
      for (int prefetch : {0, 1})
        for (int rpt : {1, 8}) {
          cg::Plan p;
          p.route = r, p.prefetch_ring = prefetch, p.rows_per_thread = rpt;
          p.bulk_copy = rpt == 8;
          variants.push_back({std::string(cg::route_name(r)) + ", prefetch " +
                                  std::to_string(prefetch) + ", rows/thread " +
                                  std::to_string(rpt) + ", bulk " + std::to_string(p.bulk_copy),
                              false, p});
        }
    for (const Variant& v : variants) {
      SCOPED_TRACE(v.name);
      std::vector<uint8_t> y0;
      DevPool::Snapshot p0;
      for (int rep = 0; rep < 3; ++rep) {
        pool.copy_from(start);
        st.y.poison();
        gdn::Cache cache = pool.cache();
        if (v.conventional)
          cg::conventional_step(layer.layer, cache, st.tokens(), st.rows(s.pad), st.y.view(),
                                v.plan);
        else
          cg::replay_step(layer.layer, cache, pool.cursors(), st.tokens(), st.rows(s.pad),
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

// ---- the flush kernel (flush.cuh) folds exactly as the group kernel's in-launch fold (GDN, KDA)

TEST(GdnCudaInvariants, FlushKernelIsBitIdenticalToTheInLaunchFold) {
  RSSM_SKIP_WITHOUT_CUDA();
  const uint64_t seed = test_seed(13004);
  SCOPED_TRACE("seed " + std::to_string(seed));
  struct Combo {
    Shape shape;
    Gate gate;
    DType in, state;
    int L;
  };
  const Gate gdn = Gate::kScalar, kda = Gate::kChannel;
  for (const Combo& cb :
       {Combo{kQwen4B, gdn, kBF16, kF32, 16}, Combo{kOdd, gdn, kF32, kF32, 8},
        Combo{kGpuSmall, gdn, kBF16, kF16, 64}, Combo{kQwen4B, gdn, kF32, kBF16, 4},
        Combo{kKimi, kda, kBF16, kF32, 16}, Combo{kOdd, kda, kF32, kF32, 8},
        Combo{kGpuSmall, kda, kBF16, kF16, 64}, Combo{kKimi, kda, kF32, kBF16, 4}}) {
    GpuCfg s = make_setup(cb.shape, cb.gate, cb.in, cb.state, cb.L, 24);
    SCOPED_TRACE(s.describe());
    Rng rng(seed);
    const DevLayer layer(s, rng);
    DevPool pool(s, cb.L, rng), start(s, cb.L, rng);
    randomize(pool, rng, 0.3);  // flush rows at every h, ordinary rows too
    start.copy_from(pool);
    std::vector<int32_t> slots;
    for (int i = 0; i < 18; ++i) slots.push_back(i + 4);
    const Batch batch(s, rng, slots, 3);
    DevStep st(s, batch.size());
    st.put(batch.ptrs, batch.ids);
    for (int rpt : {4, 8}) {
      SCOPED_TRACE("group kernel rows/thread " + std::to_string(rpt));
      // With early exit the flush launch may also overlap the ordinary one (Plan::overlap).
      for (int overlap : {0, 1}) {
        if (overlap == 1 && rpt != 8) continue;
        SCOPED_TRACE("overlap " + std::to_string(overlap));
        cuda_test::expect_two_plans_bit_identical(pool, start, st, [&](int flush_kernel) {
          cg::Plan plan;
          plan.route = cg::Route::kOutputOnly, plan.kernel = 2, plan.rows_per_thread = rpt;
          plan.flush_kernel = flush_kernel;
          plan.early_exit = rpt == 8 ? 1 : 0;  // the ordinary launch's two ways to leave a flush row
          plan.overlap = overlap;
          // The flush launch's block size: 64 / 128 / 256 threads (items of 16 / 32 / 64 rows).
          plan.flush_threads = rpt == 4 ? 64 : overlap == 0 ? 128 : 256;
          // GDN at L <= 32: the pipelined flush kernel (flush_pipe.cuh) or flush.cuh.
          plan.flush_pipeline = overlap == 0 && rpt == 8 ? 0 : 1;
          gdn::Cache cache = pool.cache();
          cg::replay_step(layer.layer, cache, pool.cursors(), st.tokens(), st.rows(s.pad),
                          st.y.view(), plan);
        });
      }
      EXPECT_TRUE(layer.guards_intact()) << "layer guard bytes overwritten";
      if (HasFailure()) return;
    }
  }
}

// The pipelined flush kernel (flush_pipe.cuh) at its steady state: many items per block (ring
// buffers and tiles reused, every barrier phase), hist up to 23 (L = 24: the largest ring whose
// 16-bit checkpoint tiles still fit two blocks per SM, else the host runs flush.cuh), an fp16
// checkpoint, an uneven last split of V (items of 56 and 44 rows), and a batch over one pass of
// the flush-row list (kFlushScan rows); against flush.cuh, bit for bit.
TEST(GdnCudaInvariants, PipelinedFlushIsBitIdenticalWithManyItemsPerBlock) {
  RSSM_SKIP_WITHOUT_CUDA();
  const uint64_t seed = test_seed(13006);
  SCOPED_TRACE("seed " + std::to_string(seed));
  struct Combo {
    Shape shape;
    DType in, state;
    int L, rows, pads;
  };
  const Shape v100{"v100", 4, 8, 128, 100};  // flush items of 56 rows: the last one 44
  for (const Combo& cb : {Combo{kQwen4B, kBF16, kF32, 16, 160, 4},
                          Combo{kQwen4B, kF32, kF16, 24, 96, 0},
                          Combo{v100, kBF16, kF32, 8, 300, 3},
                          Combo{kGpuSmall, kBF16, kF32, 16, 1100, 40}}) {
    GpuCfg s = make_setup(cb.shape, Gate::kScalar, cb.in, cb.state, cb.L, cb.rows + 2);
    SCOPED_TRACE(s.describe() + ", " + std::to_string(cb.rows) + " rows");
    Rng rng(seed);
    const DevLayer layer(s, rng);
    DevPool pool(s, cb.L, rng), start(s, cb.L, rng);
    randomize(pool, rng, 0.5);
    start.copy_from(pool);
    std::vector<int32_t> slots;
    for (int i = 0; i < cb.rows; ++i) slots.push_back(i + 1);
    const Batch batch(s, rng, slots, cb.pads);
    DevStep st(s, batch.size());
    st.put(batch.ptrs, batch.ids);
    cuda_test::expect_two_plans_bit_identical(pool, start, st, [&](int pipeline) {
      cg::Plan plan;
      plan.route = cg::Route::kOutputOnly, plan.kernel = 2, plan.rows_per_thread = 8;
      plan.flush_kernel = 1, plan.early_exit = 1, plan.overlap = 1;
      plan.flush_threads = 256;
      plan.flush_pipeline = pipeline;
      gdn::Cache cache = pool.cache();
      cg::replay_step(layer.layer, cache, pool.cursors(), st.tokens(), st.rows(s.pad),
                      st.y.view(), plan);
    });
    EXPECT_TRUE(layer.guards_intact()) << "layer guard bytes overwritten";
    if (HasFailure()) return;
  }
}

// ---- CUDA graphs: the flush/ordinary decision is data ----------------------------------------

TEST(GdnCudaInvariants, OneCapturedGraphServesEveryMixOfRows) {
  RSSM_SKIP_WITHOUT_CUDA();
  const uint64_t seed = test_seed(13003);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (Gate gate : {Gate::kScalar, Gate::kChannel}) {
    const int L = 4;
    GpuCfg s = make_setup(kGpuSmall, gate, kBF16, kF32, L, 16);
    SCOPED_TRACE(s.describe());
    Rng rng(seed);
    const DevLayer layer(s, rng);
    DevPool eager(s, L, rng), graphed(s, L, rng);
    randomize(eager, rng, 0.0);  // sequences at different h: flushes on different steps
    graphed.restore(eager.snapshot());
    const std::vector<int32_t> slots = spaced_slots(6, 2);
    const Batch shape_of_batch(s, rng, slots, 2);  // fixed row order and ids
    DevStep se(s, shape_of_batch.size()), sg(s, shape_of_batch.size());
    void* stream = cuda::stream_create();
    // Capture one step (replay + commit) with fixed buffers; host id checks are skipped while
    // capturing, the kernels read the ids and cursors on the device.
    std::vector<double> acc(shape_of_batch.ids.size());
    for (size_t b = 0; b < acc.size(); ++b) acc[b] = shape_of_batch.ids[b] == s.pad ? 0 : 1;
    DeviceBuffer acc_g(DType::kI32, {shape_of_batch.size()}, 194);
    acc_g.set_values(acc);
    Rows rows_g = sg.rows(s.pad);
    rows_g.stream = stream;
    sg.put(shape_of_batch.ptrs, shape_of_batch.ids);  // ids before capture
    cuda::device_synchronize();
    cuda::begin_capture(stream);
    cg::Plan plan;  // KDA with bulk tile copies (as captured work), GDN with cp.async
    plan.bulk_copy = gate == Gate::kChannel;
    {
      gdn::Cache cache = graphed.cache();
      RingCursors cur = graphed.cursors();
      cg::replay_step(layer.layer, cache, cur, sg.tokens(), rows_g, sg.y.view(), plan);
      replayssm::commit(cur, rows_g, acc_g.view());
    }
    void* graph = cuda::end_capture(stream);
    int flush_rows = 0, ordinary_rows = 0;
    Batch batch = shape_of_batch;
    for (int step = 0; step < 4 * L; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      batch.redraw(s, rng);
      se.put(batch.ptrs, batch.ids), sg.put(batch.ptrs, batch.ids);
      se.y.poison(), sg.y.poison();
      const std::vector<uint8_t> flags = eager.flush.download();
      for (int32_t slot : slots) (flags[slot] ? flush_rows : ordinary_rows)++;
      cuda::device_synchronize();
      gdn::Cache cache = eager.cache();
      Rows rows_e = se.rows(s.pad);
      rows_e.stream = stream;
      cg::replay_step(layer.layer, cache, eager.cursors(), se.tokens(), rows_e, se.y.view(), plan);
      commit_step(eager, batch.ids, s.pad, stream);
      cuda::graph_launch(graph, stream);
      cuda::stream_synchronize(stream);
      EXPECT_TRUE(se.y.download() == sg.y.download()) << "graph output differs from eager";
      EXPECT_TRUE(eager.snapshot() == graphed.snapshot()) << "graph pool differs from eager";
      if (HasFailure()) break;
    }
    EXPECT_GT(flush_rows, 0) << "no flush row was replayed";
    EXPECT_GT(ordinary_rows, 0) << "no ordinary row was replayed";
    cuda::graph_destroy(graph);
    cuda::stream_destroy(stream);
    if (HasFailure()) return;
  }
}

// ---- errors -----------------------------------------------------------------------------------

TEST(GdnCudaErrors, BadArgumentsRaiseTypedErrorsAndTouchNothing) {
  RSSM_SKIP_WITHOUT_CUDA();
  Rng rng(test_seed(13004));
  const GpuCfg s = make_setup(kGpuSmall, Gate::kChannel, kF32, kF32, 4, 8);
  const DevLayer layer(s, rng);
  DevPool pool(s, 4, rng);
  reset_slots(pool, {1, 3});
  const Batch batch(s, rng, {1, 3}, 1);
  DevStep st(s, batch.size());
  st.put(batch.ptrs, batch.ids);
  st.y.poison();
  const DevPool::Snapshot snap = pool.snapshot();
  const std::vector<uint8_t> y0 = st.y.download();
  auto unchanged = [&](const char* what) {
    cuda::device_synchronize();
    EXPECT_TRUE(pool.snapshot() == snap) << what << ": the pool changed";
    EXPECT_TRUE(st.y.download() == y0) << what << ": y changed";
  };
  const gdn::Cache cache = pool.cache();
  const RingCursors cur = pool.cursors();
  const Rows rows = st.rows(s.pad);
  auto replay = [&](const gdn::Layer& l, const gdn::Cache& c, const RingCursors& cu, const Rows& r,
                    const cg::Plan& plan) {
    gdn::Cache cc = c;
    cg::replay_step(l, cc, cu, st.tokens(), r, st.y.view(), plan);
  };
  auto conventional = [&](const gdn::Cache& c, const cg::Plan& plan) {
    gdn::Cache cc = c;
    cg::conventional_step(layer.layer, cc, st.tokens(), rows, st.y.view(), plan);
  };

  {  // head_k_dim not compiled (K = 32)
    const Shape k32{"k32", 2, 4, 32, 16};
    const GpuCfg s32 = make_setup(k32, Gate::kScalar, kF32, kF32, 4, 8);
    Rng r2(1);
    const DevLayer l32(s32, r2);
    DevPool p(s32, 4, r2);
    DevStep st32(s32, 1);
    gdn::Cache c = p.cache();
    EXPECT_THROW(
        cg::replay_step(l32.layer, c, p.cursors(), st32.tokens(), st32.rows(-1), st32.y.view()),
        UnsupportedError);
    EXPECT_THROW(cg::conventional_step(l32.layer, c, st32.tokens(), st32.rows(-1), st32.y.view()),
                 UnsupportedError);
  }
  {  // rings longer than 64
    GpuCfg big = s;
    big.ring = RingConfig{65, 1, RingMode::kDecode};
    DevPool longp(big, 65, rng);
    EXPECT_THROW(replay(layer.layer, longp.cache(), longp.cursors(), rows, {}), UnsupportedError);
  }
  {  // a bfloat16 ring (the ring is float32 on CUDA)
    gdn::Cache c = cache;
    c.ring_u.dtype = kBF16;
    EXPECT_THROW(replay(layer.layer, c, cur, rows, {}), DTypeError);
  }
  {  // KDA gate tensors of a GDN layer
    gdn::Layer l = layer.layer;
    l.dims.gate = Gate::kScalar;
    EXPECT_THROW(replay(l, cache, cur, rows, {}), ShapeError);
  }
  {  // a speculative ring for a decode step
    RingCursors spec = cur;
    spec.config = RingConfig{4, 2, RingMode::kSpeculative};
    EXPECT_THROW(replay(layer.layer, cache, spec, rows, {}), ConfigError);
  }
  {  // misaligned checkpoint
    gdn::Cache c = cache;
    c.state.data = static_cast<char*>(c.state.data) + 4;
    c.state.shape[0] -= 1;
    EXPECT_THROW(replay(layer.layer, c, pool.cursors(), rows, {}), Error);
    EXPECT_THROW(conventional(c, {}), Error);
  }
  {  // slot ids: duplicate, out of range, pad id inside the pool
    const ref::GdnToken tk = gdnt::random_token(rng, s);
    DevStep two(s, 2);
    gdn::Cache c = cache;
    two.put({&tk, &tk}, {1, 1});
    EXPECT_THROW(cg::replay_step(layer.layer, c, cur, two.tokens(), two.rows(-1), two.y.view()),
                 SlotError);
    two.put({&tk, &tk}, {1, 9});
    EXPECT_THROW(cg::replay_step(layer.layer, c, cur, two.tokens(), two.rows(-1), two.y.view()),
                 SlotError);
    EXPECT_THROW(cg::conventional_step(layer.layer, c, two.tokens(), two.rows(-1), two.y.view()),
                 SlotError);
    two.put({&tk, &tk}, {1, 3});
    EXPECT_THROW(cg::replay_step(layer.layer, c, cur, two.tokens(), two.rows(3), two.y.view()),
                 SlotError);
  }
  {  // forced plans the kernels cannot run
    cg::Plan p;
    p.rows_per_thread = 9;
    EXPECT_THROW(replay(layer.layer, cache, cur, rows, p), ConfigError);
    EXPECT_THROW(conventional(cache, p), ConfigError);
    p = {};
    p.rows_per_block = 17;  // V = 16
    EXPECT_THROW(replay(layer.layer, cache, cur, rows, p), ConfigError);
    p = {};
    p.overlap = 2;  // 0, 1 or -1 (auto)
    EXPECT_THROW(replay(layer.layer, cache, cur, rows, p), ConfigError);
    p = {};
    p.flush_threads = 96;  // 64, 128 or 256
    EXPECT_THROW(replay(layer.layer, cache, cur, rows, p), ConfigError);
    p = {};
    p.flush_pipeline = 2;  // 0, 1 or -1 (auto)
    EXPECT_THROW(replay(layer.layer, cache, cur, rows, p), ConfigError);
  }
  {  // a host tensor among device tensors (public API: device check)
    gdn::Cache c = cache;
    std::vector<float> host(static_cast<size_t>(pool.ring_g.numel()));
    c.ring_g = make_view(host.data(), kF32, {8, 4, 4, 64});
    EXPECT_THROW(gdn::replay_step(layer.layer, c, cur, st.tokens(), rows, st.y.view()), Error);
  }
  {  // verify needs a speculative-mode ring
    gdn::Cache c = cache;
    EXPECT_THROW(gdn::verify(layer.layer, c, cur, st.tokens(), rows, st.y.view()), ConfigError);
  }
  unchanged("after the rejected calls");
  EXPECT_TRUE(pool.guards_intact() && st.guards_intact());
}

TEST(GdnCudaErrors, UncheckedOutOfRangeIdsArePadRows) {
  RSSM_SKIP_WITHOUT_CUDA();
  Rng rng(test_seed(13005));
  for (Gate gate : {Gate::kScalar, Gate::kChannel}) {
    const GpuCfg s = make_setup(kGpuSmall, gate, kBF16, kF32, 4, 8);
    SCOPED_TRACE(s.describe());
    const DevLayer layer(s, rng);
    DevPool pool(s, 4, rng);
    reset_slots(pool, {2});
    const ref::GdnToken t0 = gdnt::random_token(rng, s), t1 = gdnt::random_token(rng, s),
                        t2 = gdnt::random_token(rng, s);
    DevStep st(s, 3);
    st.put({&t0, &t1, &t2}, {-7, 2, 1 << 20});  // two ids outside [0, 8), none the pad id
    for (bool conventional : {false, true}) {
      cg::Plan plan;
      plan.bulk_copy = gate == Gate::kChannel;
      st.y.poison();
      const DevPool::Snapshot snap = pool.snapshot();
      Rows rows = st.rows(-1);
      rows.check_device_ids = false;
      gdn::Cache cache = pool.cache();
      if (conventional)
        cg::conventional_step(layer.layer, cache, st.tokens(), rows, st.y.view(), plan);
      else
        cg::replay_step(layer.layer, cache, pool.cursors(), st.tokens(), rows, st.y.view(), plan);
      cuda::device_synchronize();
      const std::vector<double> y = st.y.values();
      const int64_t n = s.shape.HV * s.shape.V;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(y[i], 0.0) << "row 0 (id -7)";
        ASSERT_EQ(y[2 * n + i], 0.0) << "row 2 (id 2^20)";
        ASSERT_FALSE(std::isnan(y[n + i])) << "row 1 (slot 2) not written";
      }
      const DevPool::Snapshot after = pool.snapshot();
      for (int32_t slot = 0; slot < 8; ++slot) {
        if (slot == 2) continue;
        EXPECT_EQ(pool.slot_diff(snap, after, slot), "") << "slot " << slot;
      }
      EXPECT_TRUE(pool.guards_intact() && st.guards_intact());
    }
  }
}

}  // namespace
}  // namespace replayssm::testing::gdn_cuda

#else  // built without the CUDA backend

TEST(GdnCudaInvariants, SkippedWithoutCudaBackend) {
  GTEST_SKIP() << "built without the CUDA backend";
}

#endif  // RSSM_WITH_CUDA
