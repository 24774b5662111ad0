// Bad input to the GDN/KDA entry points: each raises the typed error of errors.h whose message
// names the argument with the actual and expected values, and no buffer (state, ring, cursors, y)
// changes.
#include <gtest/gtest.h>

#include <functional>

#include "replayssm/errors.h"
#include "test_gdn_harness.h"

namespace replayssm::testing::gdnt {
namespace {

using gdn::Gate;

/// Every argument of one call, valid to start with; a case breaks one thing.
struct Args {
  gdn::Layer layer;
  gdn::Cache cache;
  RingCursors cur;
  gdn::Tokens in;
  Rows rows;
  TensorView y;
};

/// A contiguous view with a new shape over the same data (validation never dereferences it).
void reshape(TensorView& t, std::initializer_list<int64_t> shape) {
  t = make_view(t.data, t.dtype, shape, t.device);
}

class GdnErrors : public ::testing::Test {
 protected:
  // A pool with history in its live slots and valid inputs for `op` (KDA or GDN, bfloat16 inputs).
  void build(Op op, Gate gate) {
    op_ = op;
    Cfg c;
    c.shape = kSmall, c.gate = gate, c.dtype = DType::kBF16, c.slots = 6;
    c.ring = op == Op::kVerify ? RingConfig{8, 4, RingMode::kSpeculative}
                               : RingConfig{8, 1, RingMode::kDecode};
    ses_.emplace(c, test_seed(9001));
    ses_->start({1, 4});
    const Op run = op == Op::kConventional ? Op::kReplay : op;
    for (int i = 0; i < 3; ++i)
      ses_->step(run, {RowIn{4, {ses_->token()}, 1}, RowIn{1, {ses_->token()}, 1}});
    ASSERT_FALSE(HasFailure());
    const int64_t T = op == Op::kVerify ? 4 : 1;
    std::vector<RowIn> rows = {RowIn{4, {}, 1}, RowIn{c.pad, {}, 0}, RowIn{1, {}, 1}};
    for (RowIn& r : rows)
      if (r.slot != c.pad)
        for (int64_t t = 0; t < T; ++t) r.tokens.push_back(ses_->token());
    batch_.emplace(c, 3, T);
    batch_->fill(c, rows);
  }

  Args valid() const {
    return {ses_->pool.layer(),
            ses_->pool.cache(),
            ses_->pool.cursors(),
            batch_->tokens(),
            batch_->rows(ses_->setup.pad),
            batch_->y.view()};
  }

  void run(const Args& a) const {
    gdn::Cache cache = a.cache;
    switch (op_) {
      case Op::kConventional:
        gdn::conventional_step(a.layer, cache, a.in, a.rows, a.y);
        break;
      case Op::kReplay:
        gdn::replay_step(a.layer, cache, a.cur, a.in, a.rows, a.y);
        break;
      case Op::kVerify:
        gdn::verify(a.layer, cache, a.cur, a.in, a.rows, a.y);
        break;
    }
  }

  std::vector<std::vector<uint8_t>> snapshot() {
    std::vector<std::vector<uint8_t>> out;
    for (GuardedBuffer* b : ses_->pool.buffers()) out.push_back(b->payload());
    out.push_back(batch_->y.payload());
    return out;
  }

  /// Breaks the valid arguments with `mutate`, expects E with every substring in its message and
  /// every buffer unchanged.
  template <class E>
  void rejects(const char* what, std::function<void(Args&)> mutate,
               std::vector<std::string> parts) {
    SCOPED_TRACE(what);
    Args a = valid();
    mutate(a);
    const auto before = snapshot();
    try {
      run(a);
      ADD_FAILURE() << "accepted";
    } catch (const E& e) {
      for (const std::string& p : parts)
        EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
            << e.what() << "\n  missing: " << p;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "wrong error type: " << e.what();
    }
    EXPECT_EQ(before, snapshot()) << "a buffer changed";
    EXPECT_TRUE(ses_->pool.guards_intact() && batch_->guards_intact());
  }

  Op op_ = Op::kReplay;
  std::optional<Session> ses_;
  std::optional<Batch> batch_;
  std::vector<int32_t> ids_;
};

TEST_F(GdnErrors, ShapesDtypesStrides) {
  for (Op op : {Op::kConventional, Op::kReplay, Op::kVerify}) {
    build(op, Gate::kChannel);
    const char* name = op == Op::kConventional ? "gdn.conventional_step"
                       : op == Op::kReplay     ? "gdn.replay_step"
                                               : "gdn.verify";
    const int64_t T = op == Op::kVerify ? 4 : 1;
    rejects<ShapeError>("q head dim",
                        [&](Args& a) {
                          reshape(a.in.q, {3, T, 2, 7});
                        },
                        {name, " q: shape[3] is 7, expected 8"});
    rejects<ShapeError>("k batch",
                        [&](Args& a) {
                          reshape(a.in.k, {2, T, 2, 8});
                        },
                        {" k: shape[0] is 2, expected 3"});
    rejects<ShapeError>("v heads",
                        [&](Args& a) {
                          reshape(a.in.v, {3, T, 3, 6});
                        },
                        {" v: shape[2] is 3, expected 4"});
    rejects<ShapeError>("y value dim",
                        [&](Args& a) {
                          reshape(a.y, {3, T, 4, 5});
                        },
                        {" y: shape[3] is 5, expected 6"});
    rejects<ShapeError>("state",
                        [&](Args& a) {
                          reshape(a.cache.state, {6, 4, 8, 6});
                        },
                        {" state: shape[2] is 8, expected 6"});
    rejects<DTypeError>("v dtype", [&](Args& a) { a.in.v.dtype = DType::kF32; },
                        {" v: dtype float32, expected bfloat16"});
    rejects<DTypeError>("y dtype", [&](Args& a) { a.y.dtype = DType::kF16; },
                        {" y: dtype float16, expected bfloat16"});
    rejects<DTypeError>("q dtype", [&](Args& a) { a.in.q.dtype = DType::kF16; },
                        {" q: dtype float16, expected float32 or bfloat16"});
    rejects<DTypeError>("state dtype", [&](Args& a) { a.cache.state.dtype = DType::kBF16; },
                        {" state: dtype bfloat16, expected float32"});
    rejects<DTypeError>("A_log dtype", [&](Args& a) { a.layer.A_log.dtype = DType::kF64; },
                        {" A_log: dtype float64, expected float32"});
    rejects<StrideError>("q strides",
                         [&](Args& a) { std::swap(a.in.q.stride[2], a.in.q.stride[3]); },
                         {" q: strides are not contiguous"});
    rejects<StrideError>("state strides", [&](Args& a) { a.cache.state.stride[0] *= 2; },
                         {" state: strides are not contiguous"});
    rejects<ShapeError>("b absent", [&](Args& a) { a.in.b = TensorView{}; }, {" b: missing"});
    rejects<ShapeError>("A_log absent", [&](Args& a) { a.layer.A_log = TensorView{}; },
                        {" A_log: missing"});
    rejects<ConfigError>("HV not a multiple of H", [&](Args& a) { a.layer.dims.num_k_heads = 3; },
                         {name, "num_v_heads HV = 4 is not a multiple of num_k_heads H = 3"});
    rejects<ConfigError>("K zero", [&](Args& a) { a.layer.dims.head_k_dim = 0; },
                         {"head_k_dim K = 0, expected >= 1"});
    rejects<Error>("mixed devices", [&](Args& a) { a.y.device = Device::kCUDA; },
                   {"tensors on different devices (cpu and cuda)"});
#ifndef RSSM_WITH_CUDA
    // Without the CUDA backend, CUDA tensors are rejected (with it every op reaches the backend,
    // which these host pointers must not: test_gdn_cuda*.cpp covers it).
    rejects<UnsupportedError>(
        "CUDA tensors",
        [&](Args& a) {
          for (TensorView* t :
               {&a.layer.A_log, &a.layer.dt_bias, &a.in.q, &a.in.k, &a.in.v, &a.in.a, &a.in.b, &a.y,
                &a.cache.state, &a.cache.ring_u, &a.cache.ring_k, &a.cache.ring_g, &a.cur.origin,
                &a.cur.h, &a.cur.is_flush})
            t->device = Device::kCUDA;
        },
        {name, "CUDA backend for this op is not built yet"});
#endif
  }
}

TEST_F(GdnErrors, GateKindShapes) {
  // KDA layer given GDN-shaped tensors.
  build(Op::kVerify, Gate::kChannel);
  rejects<ShapeError>("KDA dt_bias [HV]", [](Args& a) { reshape(a.layer.dt_bias, {4}); },
                      {"dt_bias (KDA): rank 1", "expected rank 2 [4, 8]"});
  rejects<ShapeError>("KDA a [B,T,HV]",
                      [](Args& a) {
                        reshape(a.in.a, {3, 4, 4});
                      },
                      {"a (KDA): rank 3", "expected rank 4 [3, 4, 4, 8]"});
  rejects<ShapeError>("KDA ring_g [slots,HV,R]",
                      [](Args& a) {
                        reshape(a.cache.ring_g, {6, 4, 8});
                      },
                      {"ring_g (KDA): rank 3", "expected rank 4 [6, 4, 8, 8]"});
  // GDN layer given KDA-shaped tensors.
  build(Op::kVerify, Gate::kScalar);
  rejects<ShapeError>("GDN dt_bias [HV,K]",
                      [](Args& a) {
                        reshape(a.layer.dt_bias, {4, 8});
                      },
                      {"dt_bias (GDN): rank 2", "expected rank 1 [4]"});
  rejects<ShapeError>("GDN a [B,T,HV,K]",
                      [](Args& a) {
                        reshape(a.in.a, {3, 4, 4, 8});
                      },
                      {"a (GDN): rank 4", "expected rank 3 [3, 4, 4]"});
  rejects<ShapeError>("GDN ring_g [slots,HV,R,K]",
                      [](Args& a) {
                        reshape(a.cache.ring_g, {6, 4, 8, 8});
                      },
                      {"ring_g (GDN): rank 4", "expected rank 3 [6, 4, 8]"});
  // A KDA layer over a GDN pool (the whole cache from the other gate kind).
  rejects<ShapeError>("gate kind flipped", [](Args& a) { a.layer.dims.gate = Gate::kChannel; },
                      {"dt_bias (KDA): rank 1"});
}

TEST_F(GdnErrors, RingAndCursors) {
  build(Op::kVerify, Gate::kScalar);
  rejects<ShapeError>("ring_u absent", [](Args& a) { a.cache.ring_u = TensorView{}; },
                      {"gdn.verify ring_u: missing"});
  rejects<ShapeError>("ring_k rows",
                      [](Args& a) {
                        reshape(a.cache.ring_k, {6, 2, 4, 8});
                      },
                      {"ring_k: shape[2] is 4, expected 8"});
  rejects<ShapeError>("ring_u slots",
                      [](Args& a) {
                        reshape(a.cache.ring_u, {5, 4, 8, 6});
                      },
                      {"ring_u: shape[0] is 5, expected 6"});
  rejects<ConfigError>("decode cursors",
                       [](Args& a) {
                         a.cur.config = {8, 1, RingMode::kDecode};
                       },
                       {"gdn.verify: ring mode is decode, expected speculative"});
  rejects<ConfigError>("L < 2T",
                       [](Args& a) {
                         a.cur.config = {6, 4, RingMode::kSpeculative};
                       },
                       {"L = 6 < 2T = 8"});
  rejects<ConfigError>("T over ring T",
                       [](Args& a) {
                         a.cur.config = {8, 3, RingMode::kSpeculative};
                       },
                       {"gdn.verify: 4 tokens per row, expected at most ring T = 3"});
  rejects<DTypeError>("cursor dtype", [](Args& a) { a.cur.h.dtype = DType::kI64; },
                      {"cursors.h: dtype int64, expected int32"});
  rejects<ShapeError>("cursor slots", [](Args& a) { reshape(a.cur.origin, {5}); },
                      {"cursors.origin: shape[0] is 5, expected 6"});
  int32_t* h = ses_->pool.h.data<int32_t>();
  const int32_t saved = h[4];
  h[4] = 5;  // 5 + 4 tokens > 8 rows
  rejects<SlotError>(
      "cursor h without room", [](Args&) {},
      {"gdn.verify: cursors.h[4] = 5 (row 0) leaves no room for 4 records, expected 0 <= h <= 4"});
  h[4] = saved;
  int32_t* origin = ses_->pool.origin.data<int32_t>();
  origin[1] += 8;
  rejects<SlotError>("cursor origin", [](Args&) {},
                     {"cursors.origin[1] = ", "expected 0 <= origin < 8"});
  origin[1] -= 8;

  build(Op::kReplay, Gate::kChannel);
  rejects<ConfigError>("speculative cursors",
                       [](Args& a) {
                         a.cur.config = {8, 1, RingMode::kSpeculative};
                       },
                       {"gdn.replay_step: ring mode is speculative, expected decode"});
  rejects<ShapeError>("two tokens in decode",
                      [](Args& a) {
                        reshape(a.in.q, {3, 2, 2, 8});
                      },
                      {"gdn.replay_step q: shape[1] is 2, expected 1"});
}

TEST_F(GdnErrors, SlotIdsAndTokenCounts) {
  for (Op op : {Op::kConventional, Op::kReplay, Op::kVerify}) {
    build(op, Gate::kScalar);
    int32_t* ids = batch_->ids.data<int32_t>();
    const std::vector<int32_t> saved(ids, ids + 3);
    ids[2] = 9;
    rejects<SlotError>("slot out of range", [](Args&) {},
                       {"slot_ids[2] = 9 is out of range, expected 0 <= id < 6 or pad -1"});
    ids[2] = -7;
    rejects<SlotError>("negative slot", [](Args&) {}, {"slot_ids[2] = -7 is out of range"});
    ids[2] = 4;
    rejects<SlotError>("duplicate slot", [](Args&) {},
                       {"slot 4 appears twice in slot_ids (row 2)"});
    std::copy(saved.begin(), saved.end(), ids);
    rejects<SlotError>("pad id is a real slot", [](Args& a) { a.rows.pad_slot_id = 2; },
                       {"pad_slot_id 2 is a real slot, expected a value outside [0, 6)"});
    rejects<DTypeError>("slot id dtype", [](Args& a) { a.rows.slot_ids.dtype = DType::kI64; },
                        {"slot_ids: dtype int64, expected int32"});
    int32_t* n = batch_->ntok.data<int32_t>();
    const int32_t T = op == Op::kVerify ? 4 : 1;
    n[0] = T + 1;
    rejects<SlotError>(
        "num_tokens above T", [](Args&) {},
        {"num_tokens[0] = " + std::to_string(T + 1) + ", expected 1.." + std::to_string(T)});
    n[0] = 0;
    rejects<SlotError>("num_tokens zero", [](Args&) {},
                       {"num_tokens[0] = 0, expected 1.." + std::to_string(T)});
    n[0] = T;
  }
}

TEST_F(GdnErrors, ResetSlots) {
  build(Op::kReplay, Gate::kScalar);
  auto reset_rejects = [&](const char* what, std::vector<int32_t> ids, TensorView state,
                           std::string part, auto tag) {
    using E = decltype(tag);
    SCOPED_TRACE(what);
    const auto before = snapshot();
    gdn::Cache cache = ses_->pool.cache();
    cache.state = state;
    Rows rows{make_view(ids.data(), DType::kI32, {static_cast<int64_t>(ids.size())}), -1, {}};
    try {
      gdn::reset_slots(cache, rows);
      ADD_FAILURE() << "accepted";
    } catch (const E& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
    EXPECT_EQ(before, snapshot());
  };
  const TensorView state = ses_->pool.state.view();
  reset_rejects("out of range", {1, 6}, state, "gdn.reset_slots: slot_ids[1] = 6 is out of range",
                SlotError(""));
  reset_rejects("duplicate", {3, 3}, state, "slot 3 appears twice", SlotError(""));
  TensorView bad = state;
  reshape(bad, {6, 4, 48});
  reset_rejects("state rank", {1}, bad, "gdn.reset_slots state: rank 3", ShapeError(""));
  bad = state;
  bad.dtype = DType::kBF16;
  reset_rejects("state dtype", {1}, bad, "gdn.reset_slots state: dtype bfloat16, expected float32",
                DTypeError(""));
}

}  // namespace
}  // namespace replayssm::testing::gdnt
