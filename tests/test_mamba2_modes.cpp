// Mamba-2 state precision modes (precision.h) on the CPU backend, against the fp64 oracle and
// against fp32/fp32:
//  * every split mode and shared baseline equals the oracle step by step when the oracle starts
//    each step from the CPU's own (decoded) checkpoint / read copy: outputs within float32 rounding,
//    and the states the step writes within one quantum of their format; pad rows, a pool larger
//    than the batch, slots outside the batch untouched, guards intact;
//  * with an fp32 recurrence every checkpoint equals fp32/fp32's bit for bit, flush outputs too,
//    the read copy is exactly the codec's encoding of the checkpoint, and ordinary outputs differ
//    from fp32/fp32 by at most the read copy's error seen through C;
//  * shared-nvfp4 drifts away from the fp32 state; fp16sr is reproducible per seed and differs
//    across seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "replayssm/mamba2.h"
#include "replayssm/ring.h"
#include "test_mamba2_util.h"
#include "test_state_modes_util.h"

namespace replayssm {
namespace {

using namespace testing::m2;
using testing::GuardedBuffer;
using testing::Rng;
using testing::modes::FormatBuffer;
using testing::modes::ModeBuffers;

constexpr Shape kNanoHead{2, 80, 128, 1, "nano-4b heads 2x80x128 g1"};
constexpr Shape kTiny{4, 8, 32, 2, "tiny 4x8x32 g2"};

/// A CPU pool in one mode plus the oracle's sequences of its slots.
struct ModePool {
  Shape s;
  RingConfig cfg;
  int64_t slots;
  Pool pool;  // ring and cursors (its fp32 `state` is used only by fp32/fp32)
  ModeBuffers mb;
  std::vector<ref::Mamba2Seq> seqs;
  ModePool(const Shape& s_, const StateMode& m, const RingConfig& c, int64_t slots_, Rng& rng,
           const Params& prm, uint64_t seed = 5)
      : s(s_), cfg(c), slots(slots_), pool(s_, slots_, c, rng), mb(m, slots_, s_.H, s_.P, s_.N, seed) {
    for (int64_t i = 0; i < slots; ++i) {
      ref::Mamba2Seq q = ref::mamba2_new_seq(prm.ref, cfg);
      q.prec.mode = m;
      q.prec.read.assign(s.H * s.P * s.N, 0.0);
      q.prec.sr = ref::SrKeyRef{static_cast<uint64_t>(mb.seeds.data<int64_t>()[i]), static_cast<uint32_t>(i), 0};
      seqs.push_back(q);
    }
  }
  mamba2::Cache cache() const {
    mamba2::Cache c = pool.cache();
    if (!mb.mode.is_default()) {
      c.state = mb.state.view();
      c.state_scales = mb.state.scales();
      c.read = mb.read_buffer();
      c.sr = mb.sr();
    }
    c.mode = mb.mode;
    return c;
  }
  std::vector<float> checkpoint(int64_t slot) const {
    if (mb.mode.is_default())
      return std::vector<float>(pool.state.data<float>() + slot * s.H * s.P * s.N,
                                pool.state.data<float>() + (slot + 1) * s.H * s.P * s.N);
    return mb.state.decode(slot);
  }
  std::vector<uint8_t> slot_bytes(int64_t slot) const {
    std::vector<uint8_t> b = mb.slot_bytes(slot);
    for (const GuardedBuffer* g : {&pool.state, &pool.ring_x, &pool.ring_dt, &pool.ring_B}) {
      const auto p = g->payload();
      const size_t per = p.size() / slots;
      b.insert(b.end(), p.begin() + slot * per, p.begin() + (slot + 1) * per);
    }
    return b;
  }
  void reset_all() {
    std::vector<int32_t> ids(slots);
    std::iota(ids.begin(), ids.end(), 0);
    GuardedBuffer idb(DType::kI32, {slots}, 3);
    std::copy(ids.begin(), ids.end(), idb.data<int32_t>());
    Rows rows{idb.view(), -1};
    mamba2::Cache c = cache();
    mamba2::reset_slots(c, rows);
    RingCursors cur = pool.cursors(cfg);
    replayssm::reset(cur, rows);
  }
};

/// Rows of one step: `real` distinct random slots and one pad row at a random position.
std::vector<int32_t> pick_rows(int64_t slots, int64_t real, Rng& rng) {
  std::vector<int32_t> all(slots);
  std::iota(all.begin(), all.end(), 0);
  rng.shuffle(all);
  std::vector<int32_t> rows(all.begin(), all.begin() + real);
  rows.insert(rows.begin() + rng.integer(0, real), -1);
  return rows;
}

/// Runs `steps` decode steps of a mode on a pool, the oracle synchronised to the CPU's state
/// before every step (so both read the same quantised values), and checks everything listed in
/// the file comment.
void run_against_oracle(const Shape& s, const StateMode& mode, int L, int steps, uint64_t seed) {
  SCOPED_TRACE(std::string(s.name) + " mode " + mode.name() + " L=" + std::to_string(L) +
               " seed " + std::to_string(seed));
  Rng rng(seed);
  const Params prm(s, Options{DType::kF32, false, true, true}, rng);
  const RingConfig cfg{mode.shared ? 1 : L, 1, RingMode::kDecode};
  const int64_t slots = 5, real = 3, batch = real + 1;
  ModePool mp(s, mode, cfg, slots, rng, prm);
  mp.reset_all();
  const mamba2::Layer layer = prm.layer();
  int flushes = 0;
  for (int step = 0; step < steps; ++step) {
    const std::vector<int32_t> ids = pick_rows(slots, real, rng);
    Inputs in(prm, batch, 1);
    std::copy(ids.begin(), ids.end(), in.slot_ids.data<int32_t>());
    std::vector<ref::Mamba2Token> toks(batch);
    for (int64_t b = 0; b < batch; ++b) {
      if (ids[b] < 0) continue;
      toks[b] = prm.token(rng);
      in.put(b, 0, toks[b]);
    }
    // Oracle from the CPU's state: checkpoint, read copy, SR counter.
    for (int64_t b = 0; b < batch; ++b) {
      if (ids[b] < 0) continue;
      ref::Mamba2Seq& q = mp.seqs[ids[b]];
      q.S0 = testing::modes::to_vec(mp.checkpoint(ids[b]));
      if (mode.is_split()) q.prec.read = testing::modes::to_vec(mp.mb.read_of(ids[b]));
      if (mode.uses_sr()) {
        ASSERT_EQ(q.prec.sr.step, static_cast<uint32_t>(mp.mb.steps.data<int32_t>()[ids[b]]));
      }
      ASSERT_EQ(q.cursor, mp.pool.cursor(ids[b])) << "step " << step;
    }
    std::vector<std::vector<uint8_t>> before(slots);
    for (int64_t i = 0; i < slots; ++i) before[i] = mp.slot_bytes(i);
    mamba2::Cache cache = mp.cache();
    const Rows rows{in.slot_ids.view(), -1};
    in.y.poison();
    if (mode.shared)
      mamba2::conventional_step(layer, cache, in.tokens(), rows, in.y.view());
    else
      mamba2::replay_step(layer, cache, mp.pool.cursors(cfg), in.tokens(), rows, in.y.view());
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t per = s.H * s.P;
      if (ids[b] < 0) {
        for (int64_t i = 0; i < per; ++i) ASSERT_EQ(in.y.get(b * per + i), 0.0f) << "pad row";
        continue;
      }
      ref::Mamba2Seq& q = mp.seqs[ids[b]];
      const bool flush = q.cursor.is_flush;
      const Vec want = mode.shared ? ref::mamba2_conventional_step_shared(prm.ref, q.S0, q.prec, toks[b])
                                   : ref::mamba2_replay_step(prm.ref, cfg, q, toks[b]);
      Vec got(per);
      for (int64_t i = 0; i < per; ++i) got[i] = in.y.get(b * per + i);
      ASSERT_LE(testing::rel_err(got, want), 5e-5) << "y, step " << step << " row " << b;
      if (flush || mode.shared) {
        ++flushes;
        const std::string e = testing::modes::per_head_close(
            testing::modes::to_vec(mp.checkpoint(ids[b])), q.S0, s.P * s.N,
            testing::modes::format_tol(mode.state_format()));
        ASSERT_EQ(e, "") << "checkpoint after step " << step;
        if (mode.has_read_copy()) {
          const std::string r = testing::modes::per_head_close(
              testing::modes::to_vec(mp.mb.read.decode(ids[b])), q.prec.read, s.P * s.N,
              testing::modes::format_tol(mode.read));
          ASSERT_EQ(r, "") << "read copy after step " << step;
          ASSERT_EQ(testing::modes::copy_of_checkpoint(mp.mb, ids[b]), "") << "step " << step;
        }
      }
    }
    // Slots outside the batch: every byte as before.
    for (int64_t i = 0; i < slots; ++i)
      if (std::find(ids.begin(), ids.end(), i) == ids.end()) {
        ASSERT_TRUE(mp.slot_bytes(i) == before[i]) << "slot " << i << " touched at step " << step;
      }
    if (!mode.shared) {
      GuardedBuffer acc(DType::kI32, {batch}, 9);
      for (int64_t b = 0; b < batch; ++b) acc.data<int32_t>()[b] = ids[b] < 0 ? 0 : 1;
      RingCursors cur = mp.pool.cursors(cfg);
      replayssm::commit(cur, rows, acc.view());
      for (int64_t b = 0; b < batch; ++b)
        if (ids[b] >= 0) mp.seqs[ids[b]].cursor = ref::commit(mp.seqs[ids[b]].cursor, 1, cfg);
    }
  }
  EXPECT_GT(flushes, 0);
  EXPECT_TRUE(mp.mb.guards_intact() && mp.pool.guards_intact() && prm.guards_intact());
}

TEST(Mamba2Modes, EveryModeMatchesTheOracle) {
  const uint64_t seed = testing::test_seed(601);
  for (const StateMode& m : state_modes()) {
    run_against_oracle(kTiny, m, 4, 26, seed);
    run_against_oracle(kNanoHead, m, 8, 20, seed + 1);
  }
}

/// Runs a split mode and fp32/fp32 on the same tokens (same pool geometry and rows).
TEST(Mamba2Modes, Fp32RecurrenceKeepsTheFp32CheckpointBitForBit) {
  const uint64_t seed = testing::test_seed(602);
  for (const Shape& s : {kTiny, kNanoHead}) {
    for (StateFormat rd : {StateFormat::kBf16, StateFormat::kFp16, StateFormat::kNvfp4, StateFormat::kFp8}) {
      const StateMode mode{StateFormat::kFp32, rd, false};
      SCOPED_TRACE(std::string(s.name) + " " + mode.name());
      Rng rng(seed);
      const Params prm(s, Options{DType::kF32, false, true, true}, rng);
      const RingConfig cfg{4, 1, RingMode::kDecode};
      const int64_t slots = 3;
      ModePool split(s, mode, cfg, slots, rng, prm), base(s, StateMode{}, cfg, slots, rng, prm);
      split.reset_all();
      base.reset_all();
      const mamba2::Layer layer = prm.layer();
      for (int step = 0; step < 14; ++step) {
        Inputs in(prm, slots, 1), in2(prm, slots, 1);
        std::vector<ref::Mamba2Token> toks;
        for (int64_t b = 0; b < slots; ++b) {
          in.slot_ids.data<int32_t>()[b] = in2.slot_ids.data<int32_t>()[b] = static_cast<int32_t>(b);
          toks.push_back(prm.token(rng));
          in.put(b, 0, toks[b]);
          in2.put(b, 0, toks[b]);
        }
        const bool flush = split.pool.cursor(0).is_flush;
        std::vector<Vec> reads;
        for (int64_t b = 0; b < slots; ++b) reads.push_back(testing::modes::to_vec(split.mb.read_of(b)));
        mamba2::Cache c1 = split.cache(), c2 = base.cache();
        const Rows r1{in.slot_ids.view(), -1}, r2{in2.slot_ids.view(), -1};
        mamba2::replay_step(layer, c1, split.pool.cursors(cfg), in.tokens(), r1, in.y.view());
        mamba2::replay_step(layer, c2, base.pool.cursors(cfg), in2.tokens(), r2, in2.y.view());
        for (int64_t b = 0; b < slots; ++b) {
          ASSERT_TRUE(split.checkpoint(b) == base.checkpoint(b)) << "step " << step;
          const int64_t per = s.H * s.P;
          if (flush) {
            for (int64_t i = 0; i < per; ++i)
              ASSERT_EQ(in.y.get(b * per + i), in2.y.get(b * per + i)) << "flush y, step " << step;
            // The read copy is the codec's encoding of the new checkpoint, byte for byte.
            FormatBuffer fresh(rd, slots, s.H, s.P, s.N, 77);
            const std::vector<float> ck = base.checkpoint(b);
            const int64_t hr = s.H * s.P;
            std::vector<float> x(ck);
            if (rd == StateFormat::kNvfp4) {
              codecs::Nvfp4 q{make_view(fresh.values.data<uint8_t>() + b * hr * s.N / 2, DType::kU8, {hr, s.N / 2}),
                              make_view(fresh.blocks.data<uint8_t>() + b * hr * s.N / 16, DType::kU8, {hr, s.N / 16}),
                              make_view(fresh.global.data<float>() + b * s.H, DType::kF32, {s.H}), s.P};
              codecs::nvfp4_encode(make_view(x.data(), DType::kF32, {hr, s.N}), q);
            } else if (rd == StateFormat::kFp8) {
              codecs::Fp8Rows q{make_view(fresh.values.data<uint8_t>() + b * hr * s.N, DType::kU8, {hr, s.N}),
                                make_view(fresh.row_scales.data<float>() + b * hr, DType::kF32, {hr})};
              codecs::fp8_encode(make_view(x.data(), DType::kF32, {hr, s.N}), q);
            } else {
              for (int64_t i = 0; i < hr * s.N; ++i)
                fresh.values.data<uint16_t>()[b * hr * s.N + i] =
                    rd == StateFormat::kBf16 ? f32_to_bf16(x[i]) : codec::f16_rne(x[i]);
            }
            ASSERT_TRUE(fresh.slot_bytes(b, true) == split.mb.read.slot_bytes(b, true)) << "read copy, step " << step;
          } else {
            // |y - y_fp32| <= |silu(z)| sum_n |read - S0| |C_n| (the checkpoint decay is <= 1), + rounding.
            const std::vector<float> ck = base.checkpoint(b);
            for (int64_t h = 0; h < s.H; ++h)
              for (int64_t p = 0; p < s.P; ++p) {
                double bound = 0, scale = 0;
                for (int64_t n = 0; n < s.N; ++n) {
                  const int64_t e = (h * s.P + p) * s.N + n;
                  const double C = toks[b].C[prm.group(h) * s.N + n];
                  bound += std::abs(reads[b][e] - ck[e]) * std::abs(C);
                  scale += std::abs(ck[e] * C);
                }
                const int64_t k = h * s.P + p;
                const double gate = toks[b].z.empty() ? 1.0 : std::abs(silu(toks[b].z[k]));
                const double d = std::abs(in.y.get(b * per + k) - in2.y.get(b * per + k));
                ASSERT_LE(d, gate * (bound + 1e-5 * scale) + 1e-5 * std::abs(in2.y.get(b * per + k)) + 1e-30)
                    << "ordinary y, step " << step << " head " << h << " row " << p;
              }
          }
        }
        GuardedBuffer acc(DType::kI32, {slots}, 9);
        for (int64_t b = 0; b < slots; ++b) acc.data<int32_t>()[b] = 1;
        RingCursors cur1 = split.pool.cursors(cfg), cur2 = base.pool.cursors(cfg);
        replayssm::commit(cur1, r1, acc.view());
        replayssm::commit(cur2, r2, acc.view());
      }
    }
  }
}

/// At L = 1 every step flushes and no step reads the read copy: the CPU backend, as the CUDA
/// kernels, writes the checkpoint alone (the copy keeps its bytes), and with an fp32 recurrence the
/// checkpoint and outputs are fp32/fp32's bit for bit.
TEST(Mamba2Modes, RingLengthOneLeavesTheReadCopyUnwritten) {
  const uint64_t seed = testing::test_seed(605);
  for (const char* name : {"fp32/bf16", "fp32/nvfp4", "fp32/fp8", "fp16sr/nvfp4", "fp8/nvfp4"}) {
    const StateMode mode = parse_state_mode(name);
    SCOPED_TRACE(name);
    Rng rng(seed);
    const Params prm(kTiny, Options{DType::kF32, false, true, true}, rng);
    const RingConfig cfg{1, 1, RingMode::kDecode};
    const int64_t slots = 2;
    ModePool split(kTiny, mode, cfg, slots, rng, prm), base(kTiny, StateMode{}, cfg, slots, rng, prm);
    split.reset_all();
    base.reset_all();
    // Poison the copy (values and scales): a step that wrote it would change these bytes.
    split.mb.read.poison(rng);
    const std::vector<uint8_t> copy = split.mb.read.all_bytes();
    for (int step = 0; step < 5; ++step) {
      Inputs in(prm, slots, 1), in2(prm, slots, 1);
      for (int64_t b = 0; b < slots; ++b) {
        in.slot_ids.data<int32_t>()[b] = in2.slot_ids.data<int32_t>()[b] = static_cast<int32_t>(b);
        const ref::Mamba2Token t = prm.token(rng);
        in.put(b, 0, t);
        in2.put(b, 0, t);
      }
      mamba2::Cache c1 = split.cache(), c2 = base.cache();
      const Rows r1{in.slot_ids.view(), -1}, r2{in2.slot_ids.view(), -1};
      mamba2::replay_step(prm.layer(), c1, split.pool.cursors(cfg), in.tokens(), r1, in.y.view());
      mamba2::replay_step(prm.layer(), c2, base.pool.cursors(cfg), in2.tokens(), r2, in2.y.view());
      ASSERT_TRUE(split.mb.read.all_bytes() == copy) << "read copy written at step " << step;
      if (mode.recurrence != StateFormat::kFp32) continue;
      for (int64_t b = 0; b < slots; ++b)
        ASSERT_TRUE(split.checkpoint(b) == base.checkpoint(b)) << "step " << step;
      for (int64_t i = 0; i < slots * kTiny.H * kTiny.P; ++i)
        ASSERT_EQ(in.y.get(i), in2.y.get(i)) << "y, step " << step;
    }
    EXPECT_TRUE(split.mb.guards_intact());
  }
}

/// The state after `steps` conventional steps of a mode on slot 0 (same tokens for every mode).
std::vector<float> conventional_state(const StateMode& mode, int steps, uint64_t seed) {
  Rng rng(seed);
  const Params prm(kTiny, Options{DType::kF32, false, true, true}, rng);
  const RingConfig cfg{1, 1, RingMode::kDecode};
  ModePool mp(kTiny, mode, cfg, 1, rng, prm);
  mp.reset_all();
  for (int i = 0; i < steps; ++i) {
    Inputs in(prm, 1, 1);
    in.slot_ids.data<int32_t>()[0] = 0;
    in.put(0, 0, prm.token(rng));
    mamba2::Cache c = mp.cache();
    mamba2::conventional_step(prm.layer(), c, in.tokens(), Rows{in.slot_ids.view(), -1}, in.y.view());
  }
  return mp.checkpoint(0);
}

TEST(Mamba2Modes, SharedNvfp4DriftsFromTheFp32State) {
  const uint64_t seed = testing::test_seed(603);
  const std::vector<float> f32 = conventional_state(StateMode{}, 40, seed);
  const std::vector<float> q = conventional_state(parse_state_mode("shared-nvfp4"), 40, seed);
  double num = 0, den = 0;
  for (size_t i = 0; i < f32.size(); ++i) num += std::pow(q[i] - f32[i], 2), den += std::pow(f32[i], 2);
  EXPECT_GT(std::sqrt(num / den), 1e-3);  // NVFP4 keeps ~3 bits: far from float32 rounding
  EXPECT_LT(std::sqrt(num / den), 1.0);
}

/// Checkpoint bytes of slot 0 after a fp16sr/fp16sr run with the given seed base.
std::vector<uint8_t> fp16sr_bytes(uint64_t key_seed, int* sr_steps) {
  Rng rng(604);
  const Params prm(kTiny, Options{DType::kF32, false, true, true}, rng);
  const RingConfig cfg{2, 1, RingMode::kDecode};
  ModePool mp(kTiny, parse_state_mode("fp16sr/fp16sr"), cfg, 1, rng, prm, key_seed);
  mp.reset_all();
  for (int i = 0; i < 12; ++i) {
    Inputs in(prm, 1, 1);
    in.slot_ids.data<int32_t>()[0] = 0;
    in.put(0, 0, prm.token(rng));
    mamba2::Cache c = mp.cache();
    const Rows rows{in.slot_ids.view(), -1};
    mamba2::replay_step(prm.layer(), c, mp.pool.cursors(cfg), in.tokens(), rows, in.y.view());
    GuardedBuffer acc(DType::kI32, {1}, 9);
    acc.data<int32_t>()[0] = 1;
    RingCursors cur = mp.pool.cursors(cfg);
    replayssm::commit(cur, rows, acc.view());
  }
  *sr_steps = mp.mb.steps.data<int32_t>()[0];
  return mp.mb.state.slot_bytes(0);
}

TEST(Mamba2Modes, Fp16SrIsReproduciblePerSeedAndDiffersAcrossSeeds) {
  int n1 = 0, n2 = 0, n3 = 0;
  const auto a = fp16sr_bytes(5, &n1), b = fp16sr_bytes(5, &n2), c = fp16sr_bytes(6, &n3);
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a == c);
  EXPECT_EQ(n1, 6);  // L = 2: one SR write per flush, every second step
}

}  // namespace
}  // namespace replayssm
