// GDN and KDA state precision modes (precision.h) on the CPU backend:
//  * every split mode and shared baseline equals the fp64 oracle step by step when the oracle
//    starts each step from the CPU's own (decoded) checkpoint / read copy: outputs within float32
//    rounding, written states within one quantum of their format; pad rows, a pool larger than the
//    batch, slots outside the batch untouched, guards intact;
//  * with an fp32 recurrence the flush recomputes every u from the checkpoint and the ring's raw
//    (v, beta): each flushed checkpoint, and the flush step's output, equal the conventional fp32
//    step's bit for bit, although ordinary steps read (and compute their u from) the read copy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "replayssm/gdn.h"
#include "replayssm/ring.h"
#include "test_state_modes_util.h"

namespace replayssm {
namespace {

using ref::Vec;
using testing::GuardedBuffer;
using testing::Rng;
using testing::modes::ModeBuffers;

struct GShape {
  int64_t H, HV, K, V;
  bool kda;
  const char* name;
};
constexpr GShape kSmallGdn{1, 2, 16, 8, false, "gdn 1x2 K16 V8"};
constexpr GShape kSmallKda{2, 2, 32, 4, true, "kda 2x2 K32 V4"};
constexpr GShape kQwenHeads{1, 2, 128, 128, false, "qwen3.5-4b heads K=V=128"};
constexpr GShape kKimiHeads{1, 1, 128, 128, true, "kimi-linear head K=V=128"};

/// Parameters and random tokens (decays over (0, 1), beta over (0, 1), q/k/v normal).
struct GParams {
  GShape s;
  GuardedBuffer A_log, dt_bias;
  ref::GdnParams ref;
  int64_t gw() const { return s.kda ? s.K : 1; }
  GParams(const GShape& sh, Rng& rng)
      : s(sh), A_log(DType::kF32, {sh.HV}, 41), dt_bias(DType::kF32, {sh.HV * (sh.kda ? sh.K : 1)}, 42) {
    ref.H = s.H, ref.HV = s.HV, ref.K = s.K, ref.V = s.V, ref.kda = s.kda;
    for (int64_t i = 0; i < s.HV; ++i) {
      A_log.set(i, static_cast<float>(rng.uniform(-2.0, 1.0)));
      ref.A_log.push_back(A_log.get(i));
    }
    for (int64_t i = 0; i < dt_bias.numel(); ++i) {
      dt_bias.set(i, static_cast<float>(rng.uniform(-3.0, 0.5)));
      ref.dt_bias.push_back(dt_bias.get(i));
    }
  }
  gdn::Layer layer() const {
    gdn::Layer l;
    l.dims = {s.H, s.HV, s.K, s.V, s.kda ? gdn::Gate::kChannel : gdn::Gate::kScalar};
    l.A_log = A_log.view();
    l.dt_bias = s.kda ? make_view(dt_bias.view().data, DType::kF32, {s.HV, s.K}) : dt_bias.view();
    return l;
  }
  ref::GdnToken token(Rng& rng) const {
    auto vec = [&](int64_t n, double sd) {
      Vec v(n);
      for (double& e : v) e = static_cast<float>(rng.normal(0.0, sd));
      return v;
    };
    ref::GdnToken t;
    t.q = vec(s.H * s.K, 1.0), t.k = vec(s.H * s.K, 1.0), t.v = vec(s.HV * s.V, 1.0);
    t.a = vec(s.HV * gw(), 1.0), t.b = vec(s.HV, 1.5);
    return t;
  }
};

/// The token tensors of one call (T = 1), NaN where no token is fed.
struct GInputs {
  GuardedBuffer q, k, v, a, b, y, ids;
  GInputs(const GParams& p, int64_t batch)
      : q(DType::kF32, {batch, 1, p.s.H, p.s.K}, 51), k(DType::kF32, {batch, 1, p.s.H, p.s.K}, 52),
        v(DType::kF32, {batch, 1, p.s.HV, p.s.V}, 53),
        a(p.s.kda ? GuardedBuffer(DType::kF32, {batch, 1, p.s.HV, p.s.K}, 54)
                  : GuardedBuffer(DType::kF32, {batch, 1, p.s.HV}, 54)),
        b(DType::kF32, {batch, 1, p.s.HV}, 55), y(DType::kF32, {batch, 1, p.s.HV, p.s.V}, 56),
        ids(DType::kI32, {batch}, 57) {
    for (GuardedBuffer* g : {&q, &k, &v, &a, &b}) g->poison();
  }
  void put(int64_t row, const ref::GdnToken& t) {
    auto set = [&](GuardedBuffer& g, const Vec& x) {
      const int64_t n = static_cast<int64_t>(x.size());
      for (int64_t i = 0; i < n; ++i) g.set(row * n + i, static_cast<float>(x[i]));
    };
    set(q, t.q), set(k, t.k), set(v, t.v), set(a, t.a), set(b, t.b);
  }
  gdn::Tokens tokens() const { return {q.view(), k.view(), v.view(), a.view(), b.view()}; }
  Vec y_row(int64_t row, int64_t n) const {
    Vec out(n);
    for (int64_t i = 0; i < n; ++i) out[i] = y.get(row * n + i);
    return out;
  }
};

/// Row b of both inputs: slot b and the same fresh token.
void put_same_tokens(const GParams& prm, Rng& rng, int64_t slots, GInputs& x, GInputs& y) {
  for (int64_t b = 0; b < slots; ++b) {
    x.ids.data<int32_t>()[b] = y.ids.data<int32_t>()[b] = static_cast<int32_t>(b);
    const ref::GdnToken t = prm.token(rng);
    x.put(b, t);
    y.put(b, t);
  }
}

/// A CPU pool in one mode (rings, cursors, mode buffers) plus the oracle's sequences.
struct GPool {
  GShape s;
  RingConfig cfg;
  int64_t slots, R;
  GuardedBuffer state, ring_u, ring_k, ring_g, ring_v, ring_beta, origin, h, flush;
  ModeBuffers mb;
  std::vector<ref::GdnSeq> seqs;
  GPool(const GParams& p, const StateMode& m, const RingConfig& c, int64_t slots_, uint64_t seed = 5)
      : s(p.s), cfg(c), slots(slots_), R(c.rows()),
        state(DType::kF32, {slots_, p.s.HV, p.s.V, p.s.K}, 61),
        ring_u(DType::kF32, {slots_, p.s.HV, R, p.s.V}, 62), ring_k(DType::kF32, {slots_, p.s.H, R, p.s.K}, 63),
        ring_g(p.s.kda ? GuardedBuffer(DType::kF32, {slots_, p.s.HV, R, p.s.K}, 64)
                       : GuardedBuffer(DType::kF32, {slots_, p.s.HV, R}, 64)),
        ring_v(DType::kF32, {slots_, p.s.HV, R, p.s.V}, 65), ring_beta(DType::kF32, {slots_, p.s.HV, R}, 66),
        origin(DType::kI32, {slots_}, 67), h(DType::kI32, {slots_}, 68), flush(DType::kI8, {slots_}, 69),
        mb(m, slots_, p.s.HV, p.s.V, p.s.K, seed) {
    for (int64_t i = 0; i < slots; ++i) {
      ref::GdnSeq q = ref::gdn_new_seq(p.ref, cfg);
      q.prec.mode = m;
      q.prec.read.assign(s.HV * s.V * s.K, 0.0);
      q.prec.sr = ref::SrKeyRef{static_cast<uint64_t>(mb.seeds.data<int64_t>()[i]), static_cast<uint32_t>(i), 0};
      seqs.push_back(q);
    }
  }
  gdn::Cache cache() const {
    gdn::Cache c{state.view(), ring_u.view(), ring_k.view(), ring_g.view()};
    c.mode = mb.mode;
    if (!mb.mode.is_default()) {
      c.state = mb.state.view();
      c.state_scales = mb.state.scales();
      c.read = mb.read_buffer();
      c.sr = mb.sr();
      c.ring_v = ring_v.view();
      c.ring_beta = ring_beta.view();
    }
    return c;
  }
  RingCursors cursors() const { return {origin.view(), h.view(), flush.view(), cfg}; }
  Cursor cursor(int64_t slot) const {
    return {origin.data<int32_t>()[slot], h.data<int32_t>()[slot], flush.data<int8_t>()[slot] != 0};
  }
  std::vector<float> checkpoint(int64_t slot) const {
    const int64_t m = s.HV * s.V * s.K;
    if (mb.mode.is_default()) return std::vector<float>(state.data<float>() + slot * m, state.data<float>() + (slot + 1) * m);
    return mb.state.decode(slot);
  }
  std::vector<uint8_t> slot_bytes(int64_t slot) const {
    std::vector<uint8_t> out = mb.slot_bytes(slot);
    for (const GuardedBuffer* g : {&state, &ring_u, &ring_k, &ring_g, &ring_v, &ring_beta}) {
      const auto p = g->payload();
      const size_t per = p.size() / slots;
      out.insert(out.end(), p.begin() + slot * per, p.begin() + (slot + 1) * per);
    }
    return out;
  }
  bool guards_intact() const {
    for (const GuardedBuffer* g : {&state, &ring_u, &ring_k, &ring_g, &ring_v, &ring_beta, &origin, &h, &flush})
      if (!g->guards_intact()) return false;
    return mb.guards_intact();
  }
  void reset_all() {
    GuardedBuffer idb(DType::kI32, {slots}, 3);
    std::iota(idb.data<int32_t>(), idb.data<int32_t>() + slots, 0);
    const Rows rows{idb.view(), -1};
    gdn::Cache c = cache();
    gdn::reset_slots(c, rows);
    RingCursors cur = cursors();
    replayssm::reset(cur, rows);
  }
  void commit(const GuardedBuffer& ids, int64_t batch) {
    GuardedBuffer acc(DType::kI32, {batch}, 9);
    for (int64_t b = 0; b < batch; ++b) acc.data<int32_t>()[b] = ids.data<int32_t>()[b] < 0 ? 0 : 1;
    RingCursors cur = cursors();
    replayssm::commit(cur, Rows{ids.view(), -1}, acc.view());
  }
};

void run_against_oracle(const GShape& s, const StateMode& mode, int L, int steps, uint64_t seed) {
  SCOPED_TRACE(std::string(s.name) + " mode " + mode.name() + " L=" + std::to_string(L) + " seed " +
               std::to_string(seed));
  Rng rng(seed);
  const GParams prm(s, rng);
  const RingConfig cfg{mode.shared ? 1 : L, 1, RingMode::kDecode};
  const int64_t slots = 4, real = 2, batch = real + 1, per = s.HV * s.V;
  GPool gp(prm, mode, cfg, slots);
  gp.reset_all();
  int writes = 0;
  for (int step = 0; step < steps; ++step) {
    std::vector<int32_t> ids(slots);
    std::iota(ids.begin(), ids.end(), 0);
    rng.shuffle(ids);
    ids.resize(real);
    ids.insert(ids.begin() + rng.integer(0, real), -1);
    GInputs in(prm, batch);
    std::copy(ids.begin(), ids.end(), in.ids.data<int32_t>());
    std::vector<ref::GdnToken> toks(batch);
    for (int64_t b = 0; b < batch; ++b) {
      if (ids[b] < 0) continue;
      toks[b] = prm.token(rng);
      in.put(b, toks[b]);
      ref::GdnSeq& q = gp.seqs[ids[b]];
      q.S0 = testing::modes::to_vec(gp.checkpoint(ids[b]));
      if (mode.is_split()) q.prec.read = testing::modes::to_vec(gp.mb.read_of(ids[b]));
      if (mode.uses_sr()) {
        ASSERT_EQ(q.prec.sr.step, static_cast<uint32_t>(gp.mb.steps.data<int32_t>()[ids[b]]));
      }
      ASSERT_EQ(q.cursor, gp.cursor(ids[b]));
    }
    std::vector<std::vector<uint8_t>> before(slots);
    for (int64_t i = 0; i < slots; ++i) before[i] = gp.slot_bytes(i);
    gdn::Cache cache = gp.cache();
    const Rows rows{in.ids.view(), -1};
    in.y.poison();
    if (mode.shared)
      gdn::conventional_step(prm.layer(), cache, in.tokens(), rows, in.y.view());
    else
      gdn::replay_step(prm.layer(), cache, gp.cursors(), in.tokens(), rows, in.y.view());
    for (int64_t b = 0; b < batch; ++b) {
      const Vec got = in.y_row(b, per);
      if (ids[b] < 0) {
        for (double v : got) ASSERT_EQ(v, 0.0) << "pad row";
        continue;
      }
      ref::GdnSeq& q = gp.seqs[ids[b]];
      const bool flush = q.cursor.is_flush;
      const Vec want = mode.shared ? ref::gdn_conventional_step_shared(prm.ref, q.S0, q.prec, toks[b])
                                   : ref::gdn_replay_step(prm.ref, cfg, q, toks[b]);
      ASSERT_LE(testing::rel_err(got, want), 5e-5) << "y, step " << step << " row " << b;
      if (flush || mode.shared) {
        ++writes;
        ASSERT_EQ(testing::modes::per_head_close(testing::modes::to_vec(gp.checkpoint(ids[b])), q.S0,
                                                 s.V * s.K, testing::modes::format_tol(mode.state_format())),
                  "")
            << "checkpoint after step " << step;
        if (mode.has_read_copy()) {
          ASSERT_EQ(testing::modes::per_head_close(testing::modes::to_vec(gp.mb.read.decode(ids[b])),
                                                   q.prec.read, s.V * s.K, testing::modes::format_tol(mode.read)),
                    "")
              << "read copy after step " << step;
          ASSERT_EQ(testing::modes::copy_of_checkpoint(gp.mb, ids[b]), "") << "step " << step;
        }
      }
    }
    for (int64_t i = 0; i < slots; ++i)
      if (std::find(ids.begin(), ids.end(), i) == ids.end()) {
        ASSERT_TRUE(gp.slot_bytes(i) == before[i]) << "slot " << i << " touched at step " << step;
      }
    if (!mode.shared) {
      gp.commit(in.ids, batch);
      for (int64_t b = 0; b < batch; ++b)
        if (ids[b] >= 0) gp.seqs[ids[b]].cursor = ref::commit(gp.seqs[ids[b]].cursor, 1, cfg);
    }
  }
  EXPECT_GT(writes, 0);
  EXPECT_TRUE(gp.guards_intact());
}

TEST(GdnModes, EveryModeMatchesTheOracle) {
  const uint64_t seed = testing::test_seed(611);
  for (const StateMode& m : state_modes()) {
    run_against_oracle(kSmallGdn, m, 4, 22, seed);
    run_against_oracle(kSmallKda, m, 4, 22, seed + 1);
    run_against_oracle(kQwenHeads, m, 8, 12, seed + 2);
    run_against_oracle(kKimiHeads, m, 8, 12, seed + 3);
  }
}

TEST(GdnModes, Fp32RecurrenceFlushIsTheConventionalStepBitForBit) {
  const uint64_t seed = testing::test_seed(612);
  for (const GShape& s : {kSmallGdn, kSmallKda, kQwenHeads}) {
    for (StateFormat rd : {StateFormat::kBf16, StateFormat::kFp16, StateFormat::kNvfp4, StateFormat::kFp8}) {
      const StateMode mode{StateFormat::kFp32, rd, false};
      SCOPED_TRACE(std::string(s.name) + " " + mode.name());
      Rng rng(seed);
      const GParams prm(s, rng);
      const RingConfig cfg{4, 1, RingMode::kDecode}, conv_cfg{1, 1, RingMode::kDecode};
      const int64_t slots = 2, per = s.HV * s.V;
      GPool split(prm, mode, cfg, slots), conv(prm, StateMode{}, conv_cfg, slots);
      split.reset_all();
      conv.reset_all();
      int flushes = 0;
      double max_rel = 0;
      for (int step = 0; step < 13; ++step) {
        GInputs in(prm, slots), in2(prm, slots);
        put_same_tokens(prm, rng, slots, in, in2);
        const bool flush = split.cursor(0).is_flush;
        gdn::Cache c1 = split.cache(), c2 = conv.cache();
        gdn::replay_step(prm.layer(), c1, split.cursors(), in.tokens(), Rows{in.ids.view(), -1}, in.y.view());
        gdn::conventional_step(prm.layer(), c2, in2.tokens(), Rows{in2.ids.view(), -1}, in2.y.view());
        for (int64_t b = 0; b < slots; ++b) {
          const Vec y1 = in.y_row(b, per), y2 = in2.y_row(b, per);
          if (flush) {
            ASSERT_TRUE(y1 == y2) << "flush y, step " << step;
            ASSERT_TRUE(split.checkpoint(b) == conv.checkpoint(b)) << "checkpoint, step " << step;
          } else {
            max_rel = std::max(max_rel, testing::rel_err(y1, y2));
          }
        }
        flushes += flush;
        split.commit(in.ids, slots);
      }
      EXPECT_EQ(flushes, 3);
      // Ordinary outputs carry the read copy's error only: a few quanta of the format at most.
      EXPECT_LT(max_rel, 4 * testing::modes::format_tol(rd));
      EXPECT_GT(max_rel, 0.0);
    }
  }
}

/// At L = 1 every step flushes and no step reads the read copy: the CPU backend, as the CUDA
/// kernels, writes the checkpoint alone (the copy, values and scales, keeps its bytes), and with
/// an fp32 recurrence the outputs and checkpoints are the fp32 conventional step's bit for bit.
TEST(GdnModes, RingLengthOneLeavesTheReadCopyUnwritten) {
  const uint64_t seed = testing::test_seed(613);
  for (const GShape& s : {kSmallGdn, kSmallKda})
    for (const char* name : {"fp32/bf16", "fp32/nvfp4", "fp32/fp8", "fp16sr/nvfp4", "fp8/nvfp4"}) {
      const StateMode mode = parse_state_mode(name);
      SCOPED_TRACE(std::string(s.name) + " " + name);
      Rng rng(seed);
      const GParams prm(s, rng);
      const RingConfig cfg{1, 1, RingMode::kDecode};
      const int64_t slots = 2, per = s.HV * s.V;
      GPool split(prm, mode, cfg, slots), conv(prm, StateMode{}, cfg, slots);
      split.reset_all();
      conv.reset_all();
      split.mb.read.poison(rng);
      const std::vector<uint8_t> copy = split.mb.read.all_bytes();
      for (int step = 0; step < 5; ++step) {
        GInputs in(prm, slots), in2(prm, slots);
        put_same_tokens(prm, rng, slots, in, in2);
        gdn::Cache c1 = split.cache(), c2 = conv.cache();
        gdn::replay_step(prm.layer(), c1, split.cursors(), in.tokens(), Rows{in.ids.view(), -1}, in.y.view());
        gdn::conventional_step(prm.layer(), c2, in2.tokens(), Rows{in2.ids.view(), -1}, in2.y.view());
        ASSERT_TRUE(split.mb.read.all_bytes() == copy) << "read copy written at step " << step;
        split.commit(in.ids, slots);
        if (mode.recurrence != StateFormat::kFp32) continue;
        for (int64_t b = 0; b < slots; ++b) {
          ASSERT_TRUE(in.y_row(b, per) == in2.y_row(b, per)) << "y, step " << step;
          ASSERT_TRUE(split.checkpoint(b) == conv.checkpoint(b)) << "checkpoint, step " << step;
        }
      }
      EXPECT_TRUE(split.guards_intact());
    }
}

}  // namespace
}  // namespace replayssm
