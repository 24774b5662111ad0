// The walk of the CUDA split-mode tests (test_mamba2_cuda_modes.cpp, test_mamba2_cuda_quant.cpp):
// an fp32/fp32 pool and a pool in a split mode decode the same token streams through the public
// API over many flushes (4 sequences on slots 1, 3, 5, 7 of 9, entering one by one and skipping
// steps, and 2 pad rows, in a batch of 6). After every step the walk checks what every split mode
// promises: the fp32 checkpoints of the two pools equal bit for bit (nothing read from the copy
// enters the recurrence), flush rows' outputs equal bit for bit, pad rows give y = 0, the
// checkpoints of slots outside the batch untouched; at the end that both kinds of rows occurred
// and every guard is intact. The mode's own checks (its copy, its ordinary rows) are the
// caller's, through the hooks. Skipped without a CUDA device (the callers' RSSM_SKIP).
#pragma once
#ifdef RSSM_WITH_CUDA
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "replayssm/mamba2.h"
#include "replayssm/ring.h"

namespace replayssm::testing::cuda_test {

/// One step of a walk as the hooks see it.
struct SplitWalkStep {
  const m2::Params& prm;
  const RingConfig& cfg;
  const std::vector<int32_t>& ids;              ///< slot of each batch row, -1 for pad rows
  const std::vector<ref::Mamba2Token>& toks;    ///< token of each real row
  const DevPool::Snapshot& before;              ///< the split pool before the step
  const std::vector<uint8_t>& split_state;      ///< its fp32 checkpoints after the step
  const std::vector<double>& y_ref;             ///< fp32/fp32 outputs [batch, H*P]
  const std::vector<double>& y;                 ///< split-mode outputs
  bool in_batch(int32_t slot) const {
    for (int32_t id : ids)
      if (id == slot) return true;
    return false;
  }
};

/// The hooks of a split mode: its cache over the split pool, a snapshot of its copy taken
/// before each step, the check of the copy after it, and the check of one ordinary row.
struct SplitWalkHooks {
  std::function<mamba2::Cache(const DevPool& split)> cache;
  std::function<void()> before_step;
  std::function<void(const SplitWalkStep&)> check_copy;
  std::function<void(const SplitWalkStep&, int64_t row)> check_ordinary;
};

/// Walks `steps` steps at ring length L; the pools are the caller's (same shape, 9 slots).
inline void walk_split(const m2::Shape& shape, int L, int steps, Rng& rng, const m2::Params& prm,
                       DevPool& ref_pool, DevPool& split, const SplitWalkHooks& hooks) {
  DevLayer layer(prm);
  const RingConfig cfg{L, 1, RingMode::kDecode};
  const std::vector<int32_t> owned{1, 3, 5, 7};  // slots 0, 2, 4, 6, 8 are never in a batch
  {
    DeviceBuffer idb(DType::kI32, {4}, 95);
    idb.set_values(std::vector<double>(owned.begin(), owned.end()));
    Rows rows;
    rows.slot_ids = idb.view();
    mamba2::Cache a = ref_pool.cache(), b = hooks.cache(split);
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
  int flush_rows = 0, ordinary_rows = 0;
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<int> order = split_walk_order(step, rng);
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
    hooks.before_step();
    mamba2::Cache ca = ref_pool.cache(), cb = hooks.cache(split);
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
    const std::vector<double> ya = sa.y.values(), yb = sb.y.values();
    const SplitWalkStep ctx{prm, cfg, ids, toks, before, Sb, ya, yb};
    for (int32_t slot = 0; slot < split.slots; ++slot) {
      if (ctx.in_batch(slot)) continue;
      ASSERT_EQ(std::memcmp(before[0].data() + slot * n * 4, Sb.data() + slot * n * 4, n * 4), 0)
          << "checkpoint of slot " << slot << " (not in the batch) changed";
    }
    hooks.check_copy(ctx);
    if (::testing::Test::HasFatalFailure()) return;
    for (int64_t b = 0; b < batch; ++b) {
      if (ids[b] < 0) {
        for (int64_t i = 0; i < HP; ++i) ASSERT_EQ(yb[b * HP + i], 0.0) << "pad row " << b;
        continue;
      }
      if (split.cursor(before, ids[b]).is_flush) {
        ++flush_rows;
        for (int64_t i = 0; i < HP; ++i)
          ASSERT_EQ(yb[b * HP + i], ya[b * HP + i])
              << "flush row " << b << " output " << i << " differs from fp32/fp32";
        continue;
      }
      ++ordinary_rows;
      hooks.check_ordinary(ctx, b);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  EXPECT_GT(flush_rows, 0);
  EXPECT_GT(ordinary_rows, 0);
  EXPECT_TRUE(ref_pool.guards_intact() && split.guards_intact() && sb.guards_intact() &&
              layer.guards_intact())
      << "guard bytes";
}

}  // namespace replayssm::testing::cuda_test
#endif  // RSSM_WITH_CUDA
