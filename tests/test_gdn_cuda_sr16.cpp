// The fp16sr state modes on the CUDA GDN/KDA replay step (precision.h): fp16sr/fp16sr (one float16
// checkpoint, written with stochastic rounding, that ordinary steps read as it is; the ring keeps
// v and beta as in every split mode) and fp16sr/nvfp4 (ordinary steps read an NVFP4 copy of it;
// the flush recomputes every u from the float16 checkpoint and v, beta). A CUDA pool decodes random token streams (4 sequences on
// slots 1, 3, 5, 7 of 9, pad rows) through the public API; before every step a CPU twin is set to
// exactly what the GPU holds (checkpoint bytes, ring, cursors, SR step counters) and runs the same
// step on the CPU backend, whose flush recomputes each record's u from the ring's v and beta
// (the GPU's flush folds the u its ordinary steps appended from the same checkpoint). Checked
// after every step:
//   - outputs equal the CPU backend's within float32 reordering; pad rows give y = 0;
//   - flushed checkpoints: the CPU codec's random words and rounding (cuda_sr16_check.h: at most
//     1% of the elements differ, by one float16 step); other slots keep every byte;
//   - the SR step counters equal the CPU's (one per flush; every row at L = 1);
//   - fp16sr/nvfp4 (L > 1): a flushed slot's NVFP4 copy is byte for byte the CPU codec's encoding
//     of the GPU's new checkpoint; other slots' copies keep every byte;
//   - same seeds give the same bytes, other seeds other bytes; guards intact.
// Skipped without a CUDA device.
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_sr16_check.h"
#include "replayssm/gdn.h"
#include "replayssm/precision.h"
#include "test_gdn_cuda_util.h"

namespace replayssm::testing::gdn_cuda {
namespace {

using cuda_test::HostCopy;

struct Walk {
  std::vector<uint8_t> checkpoints;  // the CUDA pool's after the walk
  int flush_rows = 0, ordinary_rows = 0;
};

void walk(const Shape& shape, Gate gate, int L, int steps, uint64_t seed, uint64_t seed_base,
          Walk& w, const char* mode_name = "fp16sr/fp16sr") {
  const StateMode mode = parse_state_mode(mode_name);
  const bool nvfp4 = mode.has_read_copy();
  const GpuCfg s = make_setup(shape, gate, kF32, kF16, L, 9);
  SCOPED_TRACE(s.describe() + ", " + mode_name + ", seed " + std::to_string(seed));
  Rng rng(seed);
  const DevLayer layer(s, rng);
  DevPool gpu(s, L, rng);
  const int64_t slots = s.slots, n = shape.HV * shape.V * shape.K, HVV = shape.HV * shape.V;
  DeviceBuffer ring_v(kF32, {slots, shape.HV, L, shape.V}, 191),
      ring_beta(kF32, {slots, shape.HV, L}, 192), sr_steps(DType::kI32, {slots}, 194);
  const DeviceBuffer seeds = cuda_test::sr_seeds(slots, seed_base);
  const cuda_test::DevCopy copy(StateFormat::kNvfp4, slots, shape.HV, shape.V, shape.K);
  auto gpu_cache = [&] {
    gdn::Cache c = gpu.cache();
    c.mode = mode;
    c.sr = SrKeys{seeds.view(), sr_steps.view()};
    if (nvfp4) c.read = copy.buffer();
    c.ring_v = ring_v.view();
    c.ring_beta = ring_beta.view();
    return c;
  };
  const std::vector<int32_t> owned{1, 3, 5, 7};
  cuda_test::start_sequences(gpu_cache(), gpu.cursors(), owned);
  const HostCopy A_log(layer.A_log), dt_bias(layer.dt_bias);
  gdn::Layer cpu_layer = layer.layer;
  cpu_layer.A_log = A_log.view;
  cpu_layer.dt_bias = dt_bias.view;
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<int> order = cuda_test::split_walk_order(step, rng);
    const int64_t batch = static_cast<int64_t>(order.size());
    std::vector<ref::GdnToken> toks(batch);
    std::vector<const ref::GdnToken*> tp(batch, nullptr);
    std::vector<int32_t> ids(batch, -1);
    for (int64_t b = 0; b < batch; ++b)
      if (order[b] >= 0) toks[b] = gdnt::random_token(rng, s), tp[b] = &toks[b], ids[b] = owned[order[b]];
    DevStep st(s, batch);
    st.put(tp, ids);
    st.y.poison();
    // The CPU twin := the GPU pool and step inputs.
    const DevPool::Snapshot before = gpu.snapshot();
    HostCopy cs(gpu.state), cu(gpu.ring_u), ck(gpu.ring_k), cg(gpu.ring_g), co(gpu.origin),
        ch(gpu.h), cf(gpu.flush), cv(ring_v), cb(ring_beta), cseeds(seeds), csteps(sr_steps);
    HostCopy tq(st.q), tk(st.k), tv(st.v), ta(st.a), tb(st.b), ty(st.y), tids(st.ids);
    const cuda_test::HostNvfp4 cpu_copy(copy);
    const auto copy_before = copy.download();

    gdn::Cache gc = gpu_cache();
    gdn::replay_step(layer.layer, gc, gpu.cursors(), st.tokens(), st.rows(-1), st.y.view());
    commit_step(gpu, ids, -1);
    gdn::Cache cc{cs.view, cu.view, ck.view, cg.view};
    cc.mode = mode;
    cc.sr = SrKeys{cseeds.view, csteps.view};
    if (nvfp4) cc.read = cpu_copy.buffer();
    cc.ring_v = cv.view;
    cc.ring_beta = cb.view;
    Rows crows;
    crows.slot_ids = tids.view;
    gdn::replay_step(cpu_layer, cc, RingCursors{co.view, ch.view, cf.view, s.ring},
                     gdn::Tokens{tq.view, tk.view, tv.view, ta.view, tb.view}, crows, ty.view);

    const std::vector<uint8_t> S = gpu.state.download();
    ASSERT_EQ(sr_steps.download(), csteps.bytes) << "SR step counters differ from the CPU's";
    const auto* sg = reinterpret_cast<const uint16_t*>(S.data());
    const auto* sc = reinterpret_cast<const uint16_t*>(cs.bytes.data());
    const auto* s0 = reinterpret_cast<const uint16_t*>(before[0].data());
    for (int32_t slot = 0; slot < slots; ++slot) {
      bool in = false;
      for (int32_t id : ids) in = in || id == slot;
      const bool flushed = in && gpu.cursor(before, slot).is_flush;
      cuda_test::expect_sr16_slot(sg + slot * n, sc + slot * n, s0 + slot * n, n, slot, flushed);
      if (nvfp4 && L > 1)  // (at L = 1 CUDA runs the conventional step: no copy is read or kept)
        cuda_test::expect_nvfp4_copy(copy, copy_before, copy.download(), sg + slot * n, n, slot,
                                     flushed);
      if (::testing::Test::HasFatalFailure()) return;
    }
    const std::vector<double> y = st.y.values(), yc = cuda_test::decode_all(kF32, ty.bytes);
    cuda_test::expect_sr16_outputs(
        y, yc, ids, HVV, [&](int32_t slot) { return gpu.cursor(before, slot).is_flush; },
        w.flush_rows, w.ordinary_rows);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_TRUE(gpu.guards_intact() && layer.guards_intact() && ring_v.guards_intact() &&
              ring_beta.guards_intact() && seeds.guards_intact() && sr_steps.guards_intact() &&
              copy.guards_intact())
      << "guard bytes";
  w.checkpoints = gpu.state.download();
}

TEST(GdnCudaSr16, StepsMatchTheCpuBackendAndItsStochasticRounding) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (Gate gate : {Gate::kScalar, Gate::kChannel})
    for (int L : {2, 4, 16}) {
      SCOPED_TRACE("L " + std::to_string(L));
      Walk w;
      walk(kGpuSmall, gate, L, 3 * L + 5, test_seed(17101 + L), 3, w);
      EXPECT_GT(w.flush_rows, 0);
      EXPECT_GT(w.ordinary_rows, 0);
      if (::testing::Test::HasFailure()) return;
    }
}

TEST(GdnCudaSr16, RealAndOddShapesAndConventionalSteps) {
  RSSM_SKIP_WITHOUT_CUDA();
  Walk qwen, odd, conv;
  walk(kQwen4B, Gate::kScalar, 4, 14, test_seed(17102), 4, qwen);
  EXPECT_GT(qwen.flush_rows, 0);
  walk(kOdd, Gate::kChannel, 8, 20, test_seed(17103), 4, odd);
  EXPECT_GT(odd.flush_rows, 0);
  // L = 1: every step is the conventional one, every row writes with SR.
  walk(kGpuSmall, Gate::kScalar, 1, 6, test_seed(17104), 4, conv);
  EXPECT_EQ(conv.ordinary_rows, 0);
  EXPECT_GT(conv.flush_rows, 0);
}

TEST(GdnCudaSr16, Fp16srNvfp4ReadsTheCopyOfTheStoredCheckpoint) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (Gate gate : {Gate::kScalar, Gate::kChannel})
    for (int L : {2, 4, 16}) {
      SCOPED_TRACE("L " + std::to_string(L));
      Walk w;
      walk(kGpuSmall, gate, L, 3 * L + 5, test_seed(17111 + L), 5, w, "fp16sr/nvfp4");
      EXPECT_GT(w.flush_rows, 0);
      EXPECT_GT(w.ordinary_rows, 0);
      if (::testing::Test::HasFailure()) return;
    }
  Walk qwen, kimi, conv;
  walk(kQwen4B, Gate::kScalar, 16, 40, test_seed(17112), 6, qwen, "fp16sr/nvfp4");
  EXPECT_GT(qwen.flush_rows, 0);
  walk(kKimi, Gate::kChannel, 8, 20, test_seed(17114), 6, kimi, "fp16sr/nvfp4");  // KDA, K 128
  EXPECT_GT(kimi.flush_rows, 0);
  walk(kGpuSmall, Gate::kScalar, 1, 6, test_seed(17113), 6, conv, "fp16sr/nvfp4");
  EXPECT_EQ(conv.ordinary_rows, 0);
}

TEST(GdnCudaSr16, ReproduciblePerSeedAndDifferentAcrossSeeds) {
  RSSM_SKIP_WITHOUT_CUDA();
  Walk a, b, c;
  walk(kGpuSmall, Gate::kScalar, 4, 12, test_seed(17105), 7, a);
  walk(kGpuSmall, Gate::kScalar, 4, 12, test_seed(17105), 7, b);
  walk(kGpuSmall, Gate::kScalar, 4, 12, test_seed(17105), 8, c);
  EXPECT_TRUE(a.checkpoints == b.checkpoints) << "same seeds, different checkpoints";
  EXPECT_TRUE(a.checkpoints != c.checkpoints) << "other seeds, same checkpoints";
}

}  // namespace
}  // namespace replayssm::testing::gdn_cuda
#endif  // RSSM_WITH_CUDA
