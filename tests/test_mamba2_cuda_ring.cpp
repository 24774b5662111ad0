// The device commit/reset of the ring cursors (src/cuda/ring) against the CPU implementation of
// ring.h on random walks, its checks (SlotError before any cursor moves), and the unchecked path
// (graph capture) skipping rows it cannot apply. Skipped without a CUDA device.
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "replayssm/errors.h"
#include "replayssm/ring.h"

namespace replayssm::testing::cuda_test {
namespace {

/// Cursors on the device and a CPU mirror driven by the CPU commit/reset.
struct TwinCursors {
  int64_t slots;
  RingConfig cfg;
  DeviceBuffer origin, h, flush;
  std::vector<int32_t> ho, hh;
  std::vector<int8_t> hf;
  TwinCursors(int64_t slots_, RingConfig c, Rng& rng)
      : slots(slots_),
        cfg(c),
        origin(DType::kI32, {slots_}, 101),
        h(DType::kI32, {slots_}, 102),
        flush(DType::kI8, {slots_}, 103),
        ho(slots_),
        hh(slots_),
        hf(slots_) {
    for (int64_t s = 0; s < slots; ++s) {  // valid cursors somewhere in a window
      const Cursor r = reset_cursor(cfg);
      ho[s] = static_cast<int32_t>(rng.integer(0, cfg.rows() - 1));
      hh[s] = r.h;
      hf[s] = r.is_flush;
    }
    upload();
  }
  void upload() {
    origin.set_values(std::vector<double>(ho.begin(), ho.end()));
    h.set_values(std::vector<double>(hh.begin(), hh.end()));
    flush.set_values(std::vector<double>(hf.begin(), hf.end()));
  }
  RingCursors device() const { return {origin.view(), h.view(), flush.view(), cfg}; }
  RingCursors host() {
    return {make_view(ho.data(), DType::kI32, {slots}), make_view(hh.data(), DType::kI32, {slots}),
            make_view(hf.data(), DType::kI8, {slots}), cfg};
  }
  std::string diff() const {
    const std::vector<double> o = origin.values(), hv = h.values(), f = flush.values();
    for (int64_t s = 0; s < slots; ++s)
      if (o[s] != ho[s] || hv[s] != hh[s] || f[s] != hf[s])
        return "slot " + std::to_string(s) + ": device (" + std::to_string(o[s]) + ", " +
               std::to_string(hv[s]) + ", " + std::to_string(f[s]) + ") vs cpu (" +
               std::to_string(ho[s]) + ", " + std::to_string(hh[s]) + ", " + std::to_string(hf[s]) +
               ")";
    return "";
  }
};

/// Device and host copies of one step's int32 row vectors.
struct RowVecs {
  std::vector<int32_t> ids, fed, acc;
  DeviceBuffer d_ids, d_fed, d_acc;
  RowVecs(std::vector<int32_t> i, std::vector<int32_t> f, std::vector<int32_t> a)
      : ids(std::move(i)),
        fed(std::move(f)),
        acc(std::move(a)),
        d_ids(DType::kI32, {static_cast<int64_t>(ids.size())}, 104),
        d_fed(DType::kI32, {static_cast<int64_t>(ids.size())}, 105),
        d_acc(DType::kI32, {static_cast<int64_t>(ids.size())}, 106) {
    d_ids.set_values(std::vector<double>(ids.begin(), ids.end()));
    d_fed.set_values(std::vector<double>(fed.begin(), fed.end()));
    d_acc.set_values(std::vector<double>(acc.begin(), acc.end()));
  }
  Rows device_rows(int32_t pad, bool with_fed) const {
    Rows r;
    r.slot_ids = d_ids.view();
    r.pad_slot_id = pad;
    if (with_fed) r.num_tokens = d_fed.view();
    return r;
  }
  Rows host_rows(int32_t pad, bool with_fed) {
    Rows r;
    r.slot_ids = make_view(ids.data(), DType::kI32, {static_cast<int64_t>(ids.size())});
    r.pad_slot_id = pad;
    if (with_fed)
      r.num_tokens = make_view(fed.data(), DType::kI32, {static_cast<int64_t>(fed.size())});
    return r;
  }
};

TEST(RingCuda, CommitAndResetMatchTheCpuRuleOnRandomWalks) {
  RSSM_SKIP_WITHOUT_CUDA();
  const uint64_t seed = test_seed(5001);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  for (int trial = 0; trial < 24; ++trial) {
    const int T = static_cast<int>(rng.integer(1, 8));
    const bool spec = T > 1 || rng.integer(0, 1);
    const int L = spec ? static_cast<int>(rng.integer(2 * T, 4 * T + 8))
                       : static_cast<int>(rng.integer(1, 40));
    const RingConfig cfg{L, spec ? T : 1, spec ? RingMode::kSpeculative : RingMode::kDecode};
    SCOPED_TRACE("trial " + std::to_string(trial) + ", L=" + std::to_string(L) +
                 " T=" + std::to_string(cfg.T) + " " + ring_mode_name(cfg.mode));
    const int64_t slots = 12;
    TwinCursors tc(slots, cfg, rng);
    const int32_t pad = rng.integer(0, 1) ? -1 : static_cast<int32_t>(slots);
    for (int step = 0; step < 40; ++step) {
      std::vector<int32_t> all;
      for (int32_t s = 0; s < slots; ++s) all.push_back(s);
      rng.shuffle(all);
      const int n = static_cast<int>(rng.integer(1, 6));
      std::vector<int32_t> ids(all.begin(), all.begin() + n), fed, acc;
      for (int p = static_cast<int>(rng.integer(0, 2)); p > 0; --p) ids.push_back(pad);
      rng.shuffle(ids);
      for (int32_t id : ids) {
        const int f = static_cast<int>(rng.integer(1, cfg.T));
        fed.push_back(f);
        acc.push_back(id == pad ? 0 : static_cast<int32_t>(rng.integer(1, f)));
      }
      RowVecs rv(ids, fed, acc);
      const bool with_fed = rng.integer(0, 1) == 1;
      if (!with_fed)  // absent num_tokens: every row fed T tokens
        for (size_t b = 0; b < ids.size(); ++b)
          if (ids[b] != pad) rv.acc[b] = static_cast<int32_t>(rng.integer(1, cfg.T));
      rv.d_acc.set_values(std::vector<double>(rv.acc.begin(), rv.acc.end()));
      if (rng.integer(0, 9) == 0) {
        RingCursors d = tc.device(), hc = tc.host();
        replayssm::reset(d, rv.device_rows(pad, false));
        replayssm::reset(hc, rv.host_rows(pad, false));
      } else {
        RingCursors d = tc.device(), hc = tc.host();
        replayssm::commit(d, rv.device_rows(pad, with_fed), rv.d_acc.view());
        replayssm::commit(
            hc, rv.host_rows(pad, with_fed),
            make_view(rv.acc.data(), DType::kI32, {static_cast<int64_t>(rv.acc.size())}));
      }
      cuda::device_synchronize();
      ASSERT_EQ(tc.diff(), "") << "step " << step;
      ASSERT_TRUE(tc.origin.guards_intact() && tc.h.guards_intact() && tc.flush.guards_intact());
    }
  }
}

TEST(RingCuda, CommitRejectsBadInputAndChangesNothing) {
  RSSM_SKIP_WITHOUT_CUDA();
  Rng rng(test_seed(5002));
  const RingConfig cfg{8, 4, RingMode::kSpeculative};
  TwinCursors tc(4, cfg, rng);
  auto expect_rejected = [&](std::vector<int32_t> ids, std::vector<int32_t> fed,
                             std::vector<int32_t> acc, int32_t pad, bool with_fed,
                             const char* what) {
    RowVecs rv(std::move(ids), std::move(fed), std::move(acc));
    RingCursors d = tc.device();
    EXPECT_THROW(replayssm::commit(d, rv.device_rows(pad, with_fed), rv.d_acc.view()), SlotError)
        << what;
    cuda::device_synchronize();
    EXPECT_EQ(tc.diff(), "") << what << ": a cursor moved";
  };
  expect_rejected({0, 2}, {4, 4}, {1, 5}, -1, false, "accepted > T");
  expect_rejected({0, 2}, {4, 4}, {1, 0}, -1, false, "0 accepted on a real row");
  expect_rejected({0, 4}, {4, 4}, {1, 1}, -1, false, "slot out of range");
  expect_rejected({2, 2}, {4, 4}, {1, 1}, -1, false, "slot twice");
  expect_rejected({0, 1}, {2, 1}, {3, 1}, -1, true, "accepted > tokens fed");
  expect_rejected({0, 1}, {5, 1}, {1, 1}, -1, true, "tokens fed > T");
  expect_rejected({0, 1}, {4, 4}, {1, 1}, 3, false, "pad id inside the pool");
}

TEST(RingCuda, UncheckedCommitSkipsRowsItCannotApply) {
  RSSM_SKIP_WITHOUT_CUDA();
  Rng rng(test_seed(5003));
  const RingConfig cfg{8, 4, RingMode::kSpeculative};
  TwinCursors tc(6, cfg, rng);
  // Rows: a good one, an id past the pool, a count of 0, a count above the tokens fed.
  RowVecs rv({1, 9, 2, 3}, {3, 3, 3, 2}, {2, 1, 0, 3});
  Rows rows = rv.device_rows(-1, true);
  rows.check_device_ids = false;  // as under graph capture: no host copy, no error
  RingCursors d = tc.device();
  replayssm::commit(d, rows, rv.d_acc.view());
  cuda::device_synchronize();
  // Only the good row (slot 1: 3 fed, 2 accepted) moved, by the CPU rule.
  RowVecs good({1}, {3}, {2});
  RingCursors hc = tc.host();
  replayssm::commit(hc, good.host_rows(-1, true), make_view(good.acc.data(), DType::kI32, {1}));
  EXPECT_EQ(tc.diff(), "");
  EXPECT_TRUE(tc.origin.guards_intact() && tc.h.guards_intact() && tc.flush.guards_intact());
}

}  // namespace
}  // namespace replayssm::testing::cuda_test

#else  // built without the CUDA backend

TEST(RingCuda, SkippedWithoutCudaBackend) { GTEST_SKIP() << "built without the CUDA backend"; }

#endif  // RSSM_WITH_CUDA
