// The fp16sr state modes on the CUDA Mamba-2 replay step (precision.h): fp16sr/fp16sr (one float16
// checkpoint, written with stochastic rounding, that ordinary steps read as it is) and
// fp16sr/nvfp4 (the same checkpoint; ordinary steps read an NVFP4 copy of it). A CUDA pool
// decodes random token streams (4 sequences on slots 1, 3, 5, 7 of 9, pad rows) through the public
// API; before every step the CPU backend's pool is set to exactly what the GPU holds (checkpoint
// bytes, ring, cursors, SR step counters) and runs the same step. Checked after every step:
//   - outputs equal the CPU backend's within float32 reordering (both read the same float16
//     checkpoint and ring); pad rows give y = 0;
//   - flushed checkpoints: the random words and the rounding are the CPU codec's (same Philox
//     counter, key and element index), so an element differs only where the two backends' float32
//     sums straddle an SR threshold: at most 1% of the elements, and then by one float16 step
//     (a wrong key or index would change about a third of them);
//   - checkpoints of slots that did not flush, or are outside the batch, keep every byte;
//   - the SR step counters equal the CPU's (one per flush, every row at L = 1);
//   - fp16sr/nvfp4 (L > 1): a flushed slot's NVFP4 copy is byte for byte the CPU codec's encoding
//     of the GPU's new checkpoint; other slots' copies keep every byte;
//   - same seeds on a fresh pool give the same bytes; other seeds other bytes; guards intact.
// Skipped without a CUDA device.
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_sr16_check.h"
#include "cuda_test_util.h"
#include "replayssm/mamba2.h"
#include "replayssm/precision.h"
#include "replayssm/ring.h"
#include "test_state_modes_util.h"

namespace replayssm::testing::cuda_test {
namespace {

using m2::Params;
using m2::Shape;
constexpr DType kF32 = DType::kF32, kF16 = DType::kF16;
constexpr Shape kSmall{4, 16, 64, 2, "small 4x16x64 g2"};
constexpr Shape kNanoHead{8, 80, 128, 2, "nano-like 8x80x128 g2"};

struct Walk {
  std::vector<uint8_t> checkpoints;  // the CUDA pool's after the walk
  int flush_rows = 0, ordinary_rows = 0;
};

/// Walks `steps` steps at ring length L with SR seeds from `seed_base` into w, in mode fp16sr/fp16sr
/// or fp16sr/nvfp4.
void walk(const Shape& shape, int L, int steps, uint64_t seed, uint64_t seed_base, Walk& w,
          const char* mode_name = "fp16sr/fp16sr") {
  const StateMode mode = parse_state_mode(mode_name);
  const bool nvfp4 = mode.has_read_copy();
  SCOPED_TRACE(std::string(shape.name) + ", " + mode_name + ", L " + std::to_string(L));
  Rng rng(seed);
  m2::Options o;
  const Params prm(shape, o, rng);
  const int64_t slots = 9, n = shape.H * shape.P * shape.N, HP = shape.H * shape.P;
  const RingConfig cfg{L, 1, RingMode::kDecode};
  DevLayer layer(prm);
  DevPool gpu(shape, slots, L, kF16, kF32, rng);
  DeviceBuffer sr_steps(DType::kI32, {slots}, 82);
  const DeviceBuffer seeds = sr_seeds(slots, seed_base);
  const DevCopy copy(StateFormat::kNvfp4, slots, shape.H, shape.P, shape.N);  // fp16sr/nvfp4
  auto gpu_cache = [&] {
    mamba2::Cache c = gpu.cache();
    c.mode = mode;
    c.sr = SrKeys{seeds.view(), sr_steps.view()};
    if (nvfp4) c.read = copy.buffer();
    return c;
  };
  // The CPU twin: the same geometry in host memory, overwritten from the GPU before every step.
  m2::Pool cpu(shape, slots, cfg, rng);
  modes::ModeBuffers mb(mode, slots, shape.H, shape.P, shape.N, 5);
  const mamba2::Layer cpu_layer = prm.layer();
  const std::vector<int32_t> owned{1, 3, 5, 7};
  start_sequences(gpu_cache(), gpu.cursors(cfg), owned);
  const int64_t batch = 6;
  DevStep st(prm, batch);
  m2::Inputs host(prm, batch, 1);
  DeviceBuffer acc(DType::kI32, {batch}, 96);
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<int> order = split_walk_order(step, rng);
    std::vector<ref::Mamba2Token> toks(batch);
    std::vector<const ref::Mamba2Token*> tp(batch, nullptr);
    std::vector<int32_t> ids(batch, -1);
    std::vector<double> av(batch, 0.0);
    host.clear();
    for (int64_t b = 0; b < batch; ++b) {
      host.slot_ids.data<int32_t>()[b] = -1;
      if (order[b] < 0) continue;
      toks[b] = prm.token(rng), tp[b] = &toks[b], ids[b] = owned[order[b]], av[b] = 1;
      host.put(b, 0, toks[b]);
      host.slot_ids.data<int32_t>()[b] = ids[b];
    }
    st.put(tp, ids);
    st.y.poison();
    acc.set_values(av);
    // The CPU pool := the GPU pool.
    const DevPool::Snapshot before = gpu.snapshot();
    const std::vector<uint8_t> steps_before = sr_steps.download();
    std::memcpy(mb.state.values.data<uint8_t>(), before[0].data(), before[0].size());
    GuardedBuffer* cpu_bufs[] = {&cpu.ring_x, &cpu.ring_dt, &cpu.ring_B, &cpu.origin, &cpu.h, &cpu.flush};
    for (int k = 0; k < 6; ++k)
      std::memcpy(cpu_bufs[k]->data<uint8_t>(), before[k + 1].data(), before[k + 1].size());
    std::memcpy(mb.seeds.data<uint8_t>(), seeds.download().data(), slots * 8);
    std::memcpy(mb.steps.data<uint8_t>(), steps_before.data(), slots * 4);
    const HostNvfp4 cpu_copy(copy);
    const auto copy_before = copy.download();

    mamba2::Cache gc = gpu_cache();
    mamba2::replay_step(layer.layer, gc, gpu.cursors(cfg), st.tokens(), st.rows(-1), st.y.view());
    RingCursors gcur = gpu.cursors(cfg);
    replayssm::commit(gcur, st.rows(-1), acc.view());
    cuda::device_synchronize();
    mamba2::Cache cc = cpu.cache();
    cc.state = mb.state.view();
    cc.mode = mode;
    cc.sr = mb.sr();
    if (nvfp4) cc.read = cpu_copy.buffer();
    Rows crows;
    crows.slot_ids = host.slot_ids.view();
    mamba2::replay_step(cpu_layer, cc, cpu.cursors(cfg), host.tokens(), crows, host.y.view());

    const std::vector<uint8_t> S = gpu.state.download(), steps_after = sr_steps.download();
    const uint16_t* sg = reinterpret_cast<const uint16_t*>(S.data());
    const uint16_t* sc = mb.state.values.data<uint16_t>();
    const uint16_t* s0 = reinterpret_cast<const uint16_t*>(before[0].data());
    const std::vector<double> y = st.y.values();
    ASSERT_EQ(std::memcmp(steps_after.data(), mb.steps.data<uint8_t>(), slots * 4), 0)
        << "SR step counters differ from the CPU backend's";
    for (int32_t slot = 0; slot < slots; ++slot) {
      bool in = false;
      for (int32_t id : ids) in = in || id == slot;
      const bool flushed = in && gpu.cursor(before, slot).is_flush;
      expect_sr16_slot(sg + slot * n, sc + slot * n, s0 + slot * n, n, slot, flushed);
      if (nvfp4 && L > 1)  // (at L = 1 CUDA runs the conventional step: no copy is read or kept)
        expect_nvfp4_copy(copy, copy_before, copy.download(), sg + slot * n, n, slot, flushed);
      if (::testing::Test::HasFatalFailure()) return;
    }
    std::vector<double> yc(batch * HP);
    for (int64_t i = 0; i < batch * HP; ++i) yc[i] = host.y.get(i);
    expect_sr16_outputs(y, yc, ids, HP,
                        [&](int32_t slot) { return gpu.cursor(before, slot).is_flush; },
                        w.flush_rows, w.ordinary_rows);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_TRUE(gpu.guards_intact() && st.guards_intact() && layer.guards_intact() &&
              seeds.guards_intact() && sr_steps.guards_intact() && copy.guards_intact())
      << "guard bytes";
  w.checkpoints = gpu.state.download();
}

TEST(Mamba2CudaSr16, StepsMatchTheCpuBackendAndItsStochasticRounding) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (int L : {2, 4, 16}) {
    SCOPED_TRACE("L " + std::to_string(L));
    Walk w;
    walk(kSmall, L, 3 * L + 5, test_seed(17001 + L), 3, w);
    EXPECT_GT(w.flush_rows, 0);
    EXPECT_GT(w.ordinary_rows, 0);
  }
}

TEST(Mamba2CudaSr16, RealHeadShapeAndConventionalSteps) {
  RSSM_SKIP_WITHOUT_CUDA();
  Walk real, w;
  walk(kNanoHead, 4, 14, test_seed(17002), 4, real);
  EXPECT_GT(real.flush_rows, 0);
  // L = 1: every step is the conventional one, every row writes with SR.
  walk(kSmall, 1, 6, test_seed(17003), 4, w);
  EXPECT_EQ(w.ordinary_rows, 0);
  EXPECT_GT(w.flush_rows, 0);
}

TEST(Mamba2CudaSr16, Fp16srNvfp4ReadsTheCopyOfTheStoredCheckpoint) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (int L : {2, 4, 16}) {
    Walk w;
    walk(kSmall, L, 3 * L + 5, test_seed(17011 + L), 5, w, "fp16sr/nvfp4");
    EXPECT_GT(w.flush_rows, 0);
    EXPECT_GT(w.ordinary_rows, 0);
    if (::testing::Test::HasFailure()) return;
  }
  Walk real, conv;
  walk(kNanoHead, 16, 40, test_seed(17012), 6, real, "fp16sr/nvfp4");
  EXPECT_GT(real.flush_rows, 0);
  walk(kSmall, 1, 6, test_seed(17013), 6, conv, "fp16sr/nvfp4");  // L = 1: conventional steps
  EXPECT_EQ(conv.ordinary_rows, 0);
}

TEST(Mamba2CudaSr16, ReproduciblePerSeedAndDifferentAcrossSeeds) {
  RSSM_SKIP_WITHOUT_CUDA();
  Walk a, b, c;
  walk(kSmall, 4, 12, test_seed(17004), 7, a);
  walk(kSmall, 4, 12, test_seed(17004), 7, b);
  walk(kSmall, 4, 12, test_seed(17004), 8, c);
  EXPECT_TRUE(a.checkpoints == b.checkpoints) << "same seeds, different checkpoints";
  EXPECT_TRUE(a.checkpoints != c.checkpoints) << "other seeds, same checkpoints";
}

}  // namespace
}  // namespace replayssm::testing::cuda_test
#endif  // RSSM_WITH_CUDA
