// The ring cursor protocol: ring.h's helpers and the CPU commit/reset against the oracle's
// independent state machine, over every reachable cursor and acceptance pattern.
#include <gtest/gtest.h>

#include <vector>

#include "replayssm/errors.h"
#include "replayssm/ring.h"
#include "replayssm_ref.h"
#include "test_util.h"

namespace replayssm {
namespace {

using testing::Rng;

struct HostCursors {
  std::vector<int32_t> origin, h, ids, n;
  std::vector<int8_t> flush;
  RingCursors c;
  HostCursors(int64_t slots, RingConfig cfg)
      : origin(slots, 0), h(slots, 0), flush(slots, 0) {
    c.origin = make_view(origin.data(), DType::kI32, {slots});
    c.h = make_view(h.data(), DType::kI32, {slots});
    c.is_flush = make_view(flush.data(), DType::kI8, {slots});
    c.config = cfg;
  }
  Cursor at(int s) const { return Cursor{origin[s], h[s], flush[s] != 0}; }
};

TEST(Ring, ConfigValidation) {
  EXPECT_NO_THROW((RingConfig{16, 1, RingMode::kDecode}.validate()));
  EXPECT_NO_THROW((RingConfig{1, 1, RingMode::kDecode}.validate()));
  EXPECT_NO_THROW((RingConfig{8, 4, RingMode::kSpeculative}.validate()));
  EXPECT_THROW((RingConfig{7, 4, RingMode::kSpeculative}.validate()), ConfigError);
  EXPECT_THROW((RingConfig{16, 2, RingMode::kDecode}.validate()), ConfigError);
  EXPECT_THROW((RingConfig{0, 1, RingMode::kDecode}.validate()), ConfigError);
  EXPECT_THROW((RingConfig{64, 9, RingMode::kSpeculative}.validate()), ConfigError);
  try {
    RingConfig{6, 4, RingMode::kSpeculative}.validate();
    FAIL() << "L < 2T accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("L = 6 < 2T = 8"), std::string::npos) << e.what();
  }
}

TEST(Ring, DecodeModeFlushesEveryLTokens) {
  for (int L : {1, 2, 3, 4, 8, 16, 32}) {
    RingConfig cfg{L, 1, RingMode::kDecode};
    Cursor c = reset_cursor(cfg);
    int since_flush = 0;
    for (int step = 0; step < 5 * L; ++step) {
      ++since_flush;
      ASSERT_LE(c.h, L - 1) << "L=" << L;
      ASSERT_EQ(c.is_flush, c.h == L - 1) << "L=" << L << " step " << step;
      if (c.is_flush) {
        EXPECT_EQ(folded_records(c, cfg), L);
        EXPECT_EQ(since_flush, L);
        since_flush = 0;
      }
      c = commit_cursor(c, 1, cfg);
    }
  }
}

TEST(Ring, HeaderRulesMatchOracleOnRandomWalks) {
  const uint64_t seed = testing::test_seed(20261130);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  for (int trial = 0; trial < 400; ++trial) {
    const int T = static_cast<int>(rng.integer(1, 8));
    const bool spec = T > 1 || rng.integer(0, 1);
    const int L = spec ? static_cast<int>(rng.integer(2 * T, 4 * T + 8))
                       : static_cast<int>(rng.integer(1, 40));
    RingConfig cfg{L, spec ? T : 1, spec ? RingMode::kSpeculative : RingMode::kDecode};
    Cursor a = reset_cursor(cfg), b = ref::reset(cfg);
    ASSERT_EQ(a, b);
    for (int step = 0; step < 200; ++step) {
      const int fed = spec ? static_cast<int>(rng.integer(1, T)) : 1;
      // Room for the step's records: logical h..h+fed-1 must lie inside the ring.
      ASSERT_LE(a.h + fed, cfg.rows()) << "L=" << L << " T=" << T << " step " << step;
      const int n = static_cast<int>(rng.integer(1, fed));
      a = commit_cursor(a, n, cfg);
      b = ref::commit(b, n, cfg);
      ASSERT_EQ(a, b) << "L=" << L << " T=" << T << " step " << step;
      ASSERT_GE(a.origin, 0);
      ASSERT_LT(a.origin, cfg.rows());
    }
  }
}

TEST(Ring, CommitAndResetTouchOnlyTheirSlots) {
  RingConfig cfg{8, 4, RingMode::kSpeculative};
  HostCursors hc(6, cfg);
  for (int s = 0; s < 6; ++s) { hc.origin[s] = s; hc.h[s] = s % 3; }
  std::vector<int32_t> ids = {4, -1, 1}, acc = {3, 0, 1};
  Rows rows{make_view(ids.data(), DType::kI32, {3}), -1, {}};
  commit(hc.c, rows, make_view(acc.data(), DType::kI32, {3}));
  EXPECT_EQ(hc.at(4), ref::commit(Cursor{4, 1, false}, 3, cfg));
  EXPECT_EQ(hc.at(1), ref::commit(Cursor{1, 1, false}, 1, cfg));
  for (int s : {0, 2, 3, 5}) EXPECT_EQ(hc.at(s), (Cursor{s, s % 3, false})) << s;
  reset(hc.c, rows);
  EXPECT_EQ(hc.at(4), ref::reset(cfg));
  EXPECT_EQ(hc.at(1), ref::reset(cfg));
  EXPECT_EQ(hc.at(3), (Cursor{3, 0, false}));
}

TEST(Ring, CommitRejectsBadInputAndChangesNothing) {
  RingConfig cfg{8, 4, RingMode::kSpeculative};
  HostCursors hc(4, cfg);
  std::vector<int32_t> ids = {0, 2}, acc = {1, 5};  // 5 > T
  Rows rows{make_view(ids.data(), DType::kI32, {2}), -1, {}};
  EXPECT_THROW(commit(hc.c, rows, make_view(acc.data(), DType::kI32, {2})), SlotError);
  EXPECT_EQ(hc.at(0), (Cursor{0, 0, false}));  // row 0 was valid but must not be applied
  acc = {1, 0};  // 0 accepted on a real row
  EXPECT_THROW(commit(hc.c, rows, make_view(acc.data(), DType::kI32, {2})), SlotError);
  ids = {0, 4};  // slot out of range
  acc = {1, 1};
  EXPECT_THROW(commit(hc.c, rows, make_view(acc.data(), DType::kI32, {2})), SlotError);
  ids = {2, 2};  // duplicate
  EXPECT_THROW(commit(hc.c, rows, make_view(acc.data(), DType::kI32, {2})), SlotError);
  ids = {0, 1};
  std::vector<int32_t> fed = {2, 1};  // accepted more than fed
  acc = {3, 1};
  Rows fed_rows{make_view(ids.data(), DType::kI32, {2}), -1, make_view(fed.data(), DType::kI32, {2})};
  EXPECT_THROW(commit(hc.c, fed_rows, make_view(acc.data(), DType::kI32, {2})), SlotError);
  Rows bad_pad{make_view(ids.data(), DType::kI32, {2}), 3, {}};  // pad id is a real slot
  EXPECT_THROW(commit(hc.c, bad_pad, make_view(acc.data(), DType::kI32, {2})), SlotError);
  std::vector<float> fids = {0, 1};
  Rows bad_dtype{make_view(fids.data(), DType::kF32, {2}), -1, {}};
  EXPECT_THROW(commit(hc.c, bad_dtype, make_view(acc.data(), DType::kI32, {2})), DTypeError);
  for (int s = 0; s < 4; ++s) EXPECT_EQ(hc.at(s), (Cursor{0, 0, false})) << s;
}

}  // namespace
}  // namespace replayssm

namespace replayssm {
namespace {

TEST(Ring, CommitRejectsCorruptCursorsAndChangesNothing) {
  RingConfig cfg{8, 2, RingMode::kSpeculative};
  HostCursors hc(3, cfg);
  std::vector<int32_t> ids = {0, 1}, acc = {1, 1};
  Rows rows{make_view(ids.data(), DType::kI32, {2}), -1, {}};
  const TensorView n = make_view(acc.data(), DType::kI32, {2});
  struct Case { int32_t origin, h; int8_t flush; const char* says; };
  for (const Case& c : {Case{8, 0, 0, "cursors.origin[1] = 8, expected 0..7"},
                        Case{-7, 0, 0, "cursors.origin[1] = -7"},
                        Case{0, INT32_MAX, 0, "cursors.h[1] = 2147483647, expected 0..6"},
                        Case{0, -1, 0, "cursors.h[1] = -1"},
                        Case{0, 0, 2, "cursors.is_flush[1] = 2, expected 0 or 1"}}) {
    hc.origin[1] = c.origin;
    hc.h[1] = c.h;
    hc.flush[1] = c.flush;
    try {
      commit(hc.c, rows, n);
      ADD_FAILURE() << "accepted " << c.says;
    } catch (const SlotError& e) {
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
    }
    EXPECT_EQ(hc.at(0), (Cursor{0, 0, false}));  // the valid row was not applied either
  }
}

TEST(Ring, HugeAndOverRankViewsGiveTypedErrors) {
  std::vector<int32_t> ids = {0};
  TensorView v = make_view(ids.data(), DType::kI32, {1});
  v.ndim = 1000;  // a corrupt rank must not read past the shape array
  EXPECT_NE(v.describe().find("rank 1000"), std::string::npos) << v.describe();
  RingConfig cfg{4, 1, RingMode::kDecode};
  HostCursors hc(2, cfg);
  hc.c.h.shape[0] = int64_t{1} << 40;  // more slots than int32 ids can address
  hc.c.origin.shape[0] = hc.c.is_flush.shape[0] = hc.c.h.shape[0];
  std::vector<int32_t> acc = {1};
  Rows rows{make_view(ids.data(), DType::kI32, {1}), -1, {}};
  EXPECT_THROW(commit(hc.c, rows, make_view(acc.data(), DType::kI32, {1})), ShapeError);
}

}  // namespace
}  // namespace replayssm
