// GPU tests of the CUDA Mamba-2 speculative ops: mamba2::verify (chunk form, one launch for every
// mix of rows) with the device commit, and the snapshot baseline (snapshot_verify / _select).
//
// Every verify step is checked against the fp64 oracle (ref::mamba2_verify, itself checked to
// equal sequential decoding of the same tokens) started from what the GPU stored: the checkpoint,
// ring records and cursors are downloaded before the step, so the bound of one step applies.
// Bound: |y - y_exact| <= u k |y|_abs, where |y|_abs is the same verify on absolute values
// (|S0|, |x|, |B|, |C|, |D|, times |silu z|) and k = N + m + 32 + |A| P_m (2m + 11) for a window of
// m records with delta sum P_m (the dot products' length, the window's sums and the exponentials'
// argument error, as test_mamba2_util.h derives for the replay step); bf16 outputs add 2^-8 |y|.
// Flushed checkpoints: the same bound on the fold. Also checked every step: pad rows and columns
// past T_b exactly 0 (y is NaN-poisoned), the tokens' ring records, no state written by non-flush
// rows, slots outside the batch and the cursors untouched, guard bytes intact.
// Skipped (with the reason) where no CUDA device is present.
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cuda/common/snapshot_select.h"
#include "cuda/mamba2/mamba2_cuda.h"
#include "cuda_test_util.h"
#include "test_mamba2_cuda_oracle.h"
#include "replayssm/errors.h"
#include "replayssm/mamba2.h"
#include "replayssm/ring.h"
#include "replayssm_ref.h"

namespace replayssm::testing::cuda_test {
namespace {

namespace cm = ::replayssm::cuda::mamba2;
using m2::Params;
using m2::Shape;
using ref::Vec;
constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16;
constexpr double kU = m2::kU32;
constexpr Shape kTiny{4, 16, 64, 2, "tiny 4x16x64 g2"};
constexpr Shape kOdd{6, 40, 128, 3, "odd 6x40x128 g3"};

/// Device token buffers of one speculative step: [batch, T, ...] with the token axis.
struct DevTokens {
  int64_t batch, T, H, P, G, N;
  DType in_t, dt_t;
  bool with_z;
  DeviceBuffer x, dt, B, C, z, y, ids, fed, acc;
  DevTokens(const Params& prm, int64_t batch_, int64_t T_)
      : batch(batch_), T(T_), H(prm.shape.H), P(prm.shape.P), G(prm.shape.G), N(prm.shape.N),
        in_t(prm.opt.dtype), dt_t(prm.dt_dtype()), with_z(prm.opt.z),
        x(in_t, {batch_, T_, H, P}, 81), dt(dt_t, {batch_, T_, H}, 82), B(in_t, {batch_, T_, G, N}, 83),
        C(in_t, {batch_, T_, G, N}, 84), z(in_t, {batch_, T_, H, P}, 85), y(in_t, {batch_, T_, H, P}, 86),
        ids(DType::kI32, {batch_}, 87), fed(DType::kI32, {batch_}, 88), acc(DType::kI32, {batch_}, 89) {}
  /// Uploads toks[b][s] (rows with no tokens stay NaN), the ids and the counts.
  void put(const std::vector<std::vector<ref::Mamba2Token>>& toks, const std::vector<int32_t>& slot_ids,
           const std::vector<int32_t>& counts) {
    Vec vx(x.numel(), NAN), vdt(dt.numel(), NAN), vB(B.numel(), NAN), vC(C.numel(), NAN), vz(z.numel(), NAN);
    for (int64_t b = 0; b < batch; ++b)
      for (size_t s = 0; s < toks[b].size(); ++s) {
        const ref::Mamba2Token& t = toks[b][s];
        const int64_t bs = b * T + static_cast<int64_t>(s);
        std::copy(t.x.begin(), t.x.end(), vx.begin() + bs * H * P);
        if (with_z) std::copy(t.z.begin(), t.z.end(), vz.begin() + bs * H * P);
        std::copy(t.dt.begin(), t.dt.end(), vdt.begin() + bs * H);
        std::copy(t.B.begin(), t.B.end(), vB.begin() + bs * G * N);
        std::copy(t.C.begin(), t.C.end(), vC.begin() + bs * G * N);
      }
    x.set_values(vx), dt.set_values(vdt), B.set_values(vB), C.set_values(vC), z.set_values(vz);
    ids.set_values(Vec(slot_ids.begin(), slot_ids.end()));
    fed.set_values(Vec(counts.begin(), counts.end()));
  }
  mamba2::Tokens tokens() const {
    mamba2::Tokens t{x.view(), dt.view(), B.view(), C.view(), {}};
    if (with_z) t.z = z.view();
    return t;
  }
  Rows rows(int32_t pad, bool with_counts) const {
    Rows r;
    r.slot_ids = ids.view();
    r.pad_slot_id = pad;
    if (with_counts) r.num_tokens = fed.view();
    return r;
  }
};

struct Case {
  Shape shape = kTiny;
  DType in = kF32, ring = kF32;
  bool z = true, D = true, dt_same = false;
  int L = 9, T = 4;
  int seqs = 5, pads = 2, steps = 500;
  int64_t slots = 12;
  std::string describe() const {
    std::ostringstream os;
    os << shape.name << ", in " << dtype_name(in) << ", ring " << dtype_name(ring) << ", L " << L
       << ", T " << T << (z ? ", z" : "") << (D ? ", D" : "") << ", " << steps << " steps";
    return os.str();
  }
};

/// Random valid cursors (h <= L - T, the flush rule) and random checkpoints and rings for `slots`.
void random_start(DevPool& pool, const RingConfig& cfg, const std::vector<int32_t>& slots, Rng& rng) {
  Vec o = pool.origin.values(), h = pool.h.values(), f = pool.flush.values();
  for (int32_t s : slots) {
    o[s] = static_cast<double>(rng.integer(0, cfg.rows() - 1));
    h[s] = static_cast<double>(rng.integer(0, cfg.L - cfg.T));
    f[s] = h[s] + 2 * cfg.T > cfg.L ? 1 : 0;
  }
  pool.origin.set_values(o), pool.h.set_values(h), pool.flush.set_values(f);
  Vec st = pool.state.values();
  for (double& v : st) v = rng.normal(0, 1);
  pool.state.set_values(st);
  for (DeviceBuffer* b : {&pool.ring_x, &pool.ring_B}) {
    Vec v = b->values();
    for (double& e : v) e = through(pool.ring_t, rng.normal(0, 1));
    b->set_values(v);
  }
  Vec d = pool.ring_dt.values();
  for (double& e : d) e = rng.uniform(0.01, 0.6);
  pool.ring_dt.set_values(d);
}

void run_walk(const Case& c, uint64_t seed) {
  SCOPED_TRACE(c.describe() + ", seed " + std::to_string(seed));
  Rng rng(seed);
  const Params prm(c.shape, m2::Options{c.in, c.dt_same, c.z, c.D, true}, rng);
  const DevLayer layer(prm);
  const RingConfig cfg{c.L, c.T, RingMode::kSpeculative};
  DevPool pool(c.shape, c.slots, cfg.rows(), kF32, c.ring, rng);
  const Shape& s = c.shape;
  const int64_t batch = c.seqs + c.pads;
  std::vector<int32_t> seq_slots(c.slots);
  for (int32_t i = 0; i < c.slots; ++i) seq_slots[i] = i;
  rng.shuffle(seq_slots);
  seq_slots.resize(c.seqs);
  random_start(pool, cfg, seq_slots, rng);
  const int32_t pad = -1;
  int flushes = 0, partial = 0, zero_drafts_after_multi = 0;
  std::vector<int32_t> last_accept(c.slots, 1);

  for (int step = 0; step < c.steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    // Rows: the sequences in a random order with pad rows mixed in; T_b random per row.
    std::vector<int32_t> ids(seq_slots);
    for (int i = 0; i < c.pads; ++i) ids.push_back(pad);
    rng.shuffle(ids);
    const int64_t Ty = rng.integer(1, c.T);
    const bool with_counts = rng.integer(0, 3) != 0;
    std::vector<int32_t> fed(batch);
    std::vector<std::vector<ref::Mamba2Token>> toks(batch);
    for (int64_t b = 0; b < batch; ++b) {
      fed[b] = with_counts ? static_cast<int32_t>(rng.integer(1, Ty)) : static_cast<int32_t>(Ty);
      if (ids[b] == pad) continue;
      for (int32_t t = 0; t < fed[b]; ++t) toks[b].push_back(prm.token(rng));
      if (fed[b] == 1 && last_accept[ids[b]] > 1) ++zero_drafts_after_multi;
    }
    DevTokens dev(prm, batch, Ty);
    dev.put(toks, ids, fed);
    dev.y.poison();
    const DevPool::Snapshot before = pool.snapshot();
    const Rows rows = dev.rows(pad, with_counts);
    mamba2::Cache cache = pool.cache();
    mamba2::verify(layer.layer, cache, pool.cursors(cfg), dev.tokens(), rows, dev.y.view());
    const Vec y = dev.y.values();
    const DevPool::Snapshot after = pool.snapshot();

    std::vector<bool> in_batch(c.slots, false);
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t t = 0; t < Ty; ++t) {
        const int64_t off = (b * Ty + t) * s.H * s.P;
        const bool zero = ids[b] == pad || t >= fed[b];
        if (!zero) continue;
        for (int64_t i = 0; i < s.H * s.P; ++i)
          ASSERT_EQ(y[off + i], 0.0) << "row " << b << " token " << t << " must be exactly 0";
      }
      if (ids[b] == pad) continue;
      const int32_t slot = ids[b];
      in_batch[slot] = true;
      ref::Mamba2Seq q = seq_of(pool, before, slot);
      const Cursor cur = q.cursor;
      ref::Mamba2Seq qa = abs_seq(q);
      ref::Mamba2Params pa = prm.ref;
      pa.D = absv(pa.D);
      std::vector<ref::Mamba2Token> ta;
      for (const ref::Mamba2Token& t : toks[b]) ta.push_back(abs_token(t));
      const std::vector<Vec> y_ref = ref::mamba2_verify(prm.ref, cfg, q, toks[b]);
      const std::vector<Vec> y_abs = ref::mamba2_verify(pa, cfg, qa, ta);
      const Vec k = k_of(prm, seq_of(pool, before, slot), toks[b], cfg);
      for (int64_t t = 0; t < fed[b]; ++t) {
        const int64_t off = (b * Ty + t) * s.H * s.P;
        for (int64_t i = 0; i < s.H * s.P; ++i) {
          const int64_t h = i / s.P;
          const double gate = c.z ? std::abs(m2::silu(toks[b][t].z[i])) : 1.0;
          double tol = kU * k[h] * y_abs[t][i] * gate;
          if (c.in == kBF16) tol += m2::kBf16Out * (std::abs(y_ref[t][i]) + tol);
          ASSERT_LE(std::abs(y[off + i] - y_ref[t][i]), tol)
              << "row " << b << " (slot " << slot << ", h " << cur.h << ", T_b " << fed[b]
              << ", flush " << cur.is_flush << ") token " << t << " element " << i << ": got "
              << y[off + i] << ", want " << y_ref[t][i];
        }
      }
      // The checkpoint: folded on flush rows with history, else untouched (bit for bit).
      const int64_t n = s.H * s.P * s.N;
      const size_t bytes = static_cast<size_t>(n) * 4, soff = static_cast<size_t>(pool.state_at(slot)) * 4;
      if (cur.is_flush && cur.h > 0) {
        ++flushes;
        for (int64_t i = 0; i < n; ++i) {
          const double got = decode(kF32, after[0].data(), pool.state_at(slot) + i);
          const double tol = kU * k[i / (s.P * s.N)] * qa.S0[i];
          ASSERT_LE(std::abs(got - q.S0[i]), tol) << "flushed checkpoint element " << i;
        }
      } else {
        ASSERT_EQ(std::memcmp(after[0].data() + soff, before[0].data() + soff, bytes), 0)
            << "a row without a flush wrote the checkpoint (slot " << slot << ")";
      }
      // The tokens' records at logical h..h+T_b-1: x and B exact copies, delta to a few ulps.
      for (int64_t t = 0; t < fed[b]; ++t) {
        const int64_t row = ref::ring_row(cur, cur.h + t, cfg);
        for (int64_t h = 0; h < s.H; ++h) {
          // fp32 softplus of the rounded dt + dt_bias: relative error (8 + |dt'|) u (its slope
          // sigmoid(dt') <= delta carries the argument's rounding u |dt'| over relatively).
          const double d_want = ref::mamba2_delta(prm.ref, toks[b][t], h);
          const double d_got = decode(kF32, after[2].data(), pool.dt_at(slot, h, row));
          const double arg = std::abs(toks[b][t].dt[h] + prm.ref.dt_bias[h]);
          ASSERT_LE(std::abs(d_got - d_want), (8.0 + arg) * kU * std::abs(d_want)) << "ring delta";
          for (int64_t p = 0; p < s.P; ++p)
            ASSERT_EQ(decode(c.ring, after[1].data(), pool.x_at(slot, h, row) + p), toks[b][t].x[h * s.P + p]);
        }
        for (int64_t g = 0; g < s.G; ++g)
          for (int64_t nn = 0; nn < s.N; ++nn)
            ASSERT_EQ(decode(c.ring, after[3].data(), pool.B_at(slot, g, row) + nn), toks[b][t].B[g * s.N + nn]);
      }
      // Records of the history and the rest of the ring untouched (x, delta, B).
      auto same = [&](int buf, int64_t off, int64_t n, size_t elem) {
        return std::memcmp(after[buf].data() + off * elem, before[buf].data() + off * elem,
                           static_cast<size_t>(n) * elem) == 0;
      };
      for (int64_t l = 0; l < cfg.rows(); ++l) {
        if (l >= cur.h && l < cur.h + fed[b]) continue;
        const int64_t row = ref::ring_row(cur, l, cfg);
        for (int64_t h = 0; h < s.H; ++h) {
          ASSERT_TRUE(same(1, pool.x_at(slot, h, row), s.P, dtype_size(c.ring))) << "ring x row " << row;
          ASSERT_TRUE(same(2, pool.dt_at(slot, h, row), 1, 4)) << "ring delta row " << row;
        }
        for (int64_t g = 0; g < s.G; ++g)
          ASSERT_TRUE(same(3, pool.B_at(slot, g, row), s.N, dtype_size(c.ring))) << "ring B row " << row;
      }
    }
    // Cursors only read; slots outside the batch untouched in every buffer.
    for (int i = 4; i < 7; ++i) ASSERT_EQ(after[i], before[i]) << "verify moved a cursor";
    for (int32_t slot = 0; slot < c.slots; ++slot) {
      if (in_batch[slot]) continue;
      for (int i = 0; i < 4; ++i) {  // state, ring_x, ring_dt, ring_B: every slot leads its buffer
        const size_t per = before[i].size() / static_cast<size_t>(c.slots), o = slot * per;
        ASSERT_EQ(std::memcmp(after[i].data() + o, before[i].data() + o, per), 0)
            << "buffer " << i << " of idle slot " << slot;
      }
    }

    // Accept 1..T_b per row (all-accept, all-reject and partial), commit on the device.
    std::vector<int32_t> acc(batch, 0);
    for (int64_t b = 0; b < batch; ++b) {
      if (ids[b] == pad) continue;
      const int kind = static_cast<int>(rng.integer(0, 2));
      acc[b] = kind == 0 ? fed[b] : kind == 1 ? 1 : static_cast<int32_t>(rng.integer(1, fed[b]));
      if (acc[b] < fed[b]) ++partial;
      last_accept[ids[b]] = acc[b];
    }
    dev.acc.set_values(Vec(acc.begin(), acc.end()));
    RingCursors cursors = pool.cursors(cfg);
    commit(cursors, rows, dev.acc.view());
    ASSERT_TRUE(pool.guards_intact() && layer.guards_intact());
    ASSERT_TRUE(dev.x.guards_intact() && dev.y.guards_intact() && dev.B.guards_intact());
    // The device cursors follow ring.h's rule.
    const DevPool::Snapshot moved = pool.snapshot();
    for (int64_t b = 0; b < batch; ++b) {
      if (ids[b] == pad) continue;
      const Cursor want = commit_cursor(pool.cursor(before, ids[b]), acc[b], cfg);
      ASSERT_EQ(pool.cursor(moved, ids[b]), want) << "commit of slot " << ids[b];
    }
  }
  if (c.steps >= 100) {  // the walk must exercise what it claims to
    EXPECT_GT(flushes, c.steps / 20);
    EXPECT_GT(partial, c.steps / 4);
    EXPECT_GT(zero_drafts_after_multi, 0);
  }
}

/// Sets RSSM_MAMBA2_VERIFY_PLAN for a scope and unsets it however the scope ends (a failed
/// assertion or an exception must not leave the plan to the tests after this one).
struct PlanEnv {
  explicit PlanEnv(const char* v) { setenv("RSSM_MAMBA2_VERIFY_PLAN", v, 1); }
  ~PlanEnv() { unsetenv("RSSM_MAMBA2_VERIFY_PLAN"); }
  PlanEnv(const PlanEnv&) = delete;
  PlanEnv& operator=(const PlanEnv&) = delete;
};

// The walks run both kernels: the group kernel (verify_group.cuh, the default from batch x padded
// T = 64; its default plan, and three streaming warps, so that a warp's column units change from
// one unit to the next; with units requested into L2 ahead, the default at some batches and T)
// and the one-head kernel (verify.cuh, the default below), forced through the plan override.
constexpr const char* kKernels[] = {"group=1", "group=1,threads=160", "group=1,l2ahead=4", "group=0"};

/// run_walk once per kernel (and plan) of kKernels.
void walk_each_kernel(const Case& c, uint64_t seed) {
  for (const char* plan : kKernels) {
    SCOPED_TRACE(plan);
    const PlanEnv env(plan);
    run_walk(c, seed);
  }
}

TEST(Mamba2CudaVerify, RandomWalkMatchesOracleTinyF32) {
  RSSM_SKIP_WITHOUT_CUDA();
  Case c;
  walk_each_kernel(c, test_seed(501));
}

TEST(Mamba2CudaVerify, RandomWalkMatchesOracleBf16RingT8) {
  RSSM_SKIP_WITHOUT_CUDA();
  Case c;
  c.shape = kOdd, c.in = kBF16, c.ring = kBF16, c.dt_same = true, c.L = 16, c.T = 8;
  c.steps = 500, c.seqs = 3, c.pads = 1, c.slots = 6;
  walk_each_kernel(c, test_seed(502));
}

TEST(Mamba2CudaVerify, RandomWalkBf16InputsF32RingNoGateNoD) {
  RSSM_SKIP_WITHOUT_CUDA();
  Case c;
  c.in = kBF16, c.ring = kF32, c.z = false, c.D = false, c.L = 6, c.T = 3, c.steps = 200;
  run_walk(c, test_seed(503));
}

// A ring longer than 32 records: the window's second lane word of deltas and its carry.
TEST(Mamba2CudaVerify, RandomWalkRingLongerThan32) {
  RSSM_SKIP_WITHOUT_CUDA();
  Case c;
  c.L = 44, c.T = 8, c.steps = 120;
  walk_each_kernel(c, test_seed(509));
}

// Eight heads per group (the group kernel folds flush rows of many heads' units) and the
// longest ring the kernels take (R = 64: the window's second lane word full).
TEST(Mamba2CudaVerify, RandomWalkManyHeadsPerGroupAndFullRing) {
  RSSM_SKIP_WITHOUT_CUDA();
  Case c;
  c.shape = Shape{16, 16, 64, 2, "16x16x64 g2"};
  c.in = kBF16, c.ring = kBF16, c.L = 64, c.T = 8, c.steps = 150;
  walk_each_kernel(c, test_seed(511));
}

// Row splits (blocks of part of a head, uneven last block), small blocks and heads per block of
// the group kernel, and the one-head kernel (group=0), through the tuning override of the plan.
TEST(Mamba2CudaVerify, RandomWalkRowSplitsAndSmallBlocks) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (const char* plan : {"group=1,split=2,threads=96", "group=1,split=3,threads=128,hpb=1",
                           "group=1,split=3,threads=128,hpb=1,l2ahead=4",
                           "group=1,hpb=2,threads=160", "group=1,threads=160,l2ahead=4",
                           "group=0,split=2,threads=64", "group=0,split=3,threads=128"}) {
    SCOPED_TRACE(std::string("RSSM_MAMBA2_VERIFY_PLAN=") + plan);
    const PlanEnv env(plan);
    Case c;
    c.shape = kOdd, c.in = kBF16, c.ring = kBF16, c.L = 12, c.T = 5, c.steps = 150;
    run_walk(c, test_seed(508));
  }
}

TEST(Mamba2CudaVerify, RealShapesNanoAndSuper) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (const Shape& s : {m2::kNano, m2::kSuper}) {
    Case c;
    c.shape = s, c.in = kBF16, c.ring = kBF16, c.L = 16, c.T = 4;
    c.steps = 6, c.seqs = 2, c.pads = 1, c.slots = 3;
    walk_each_kernel(c, test_seed(504));
  }
}

// One captured graph (verify + device commit) replayed step after step equals eager launches bit
// for bit: outputs, checkpoints, rings and cursors.
TEST(Mamba2CudaVerify, CapturedGraphEqualsEager) {
  RSSM_SKIP_WITHOUT_CUDA();
  // The group kernel (the one-head kernel, the default at this batch and T = 3, passed this test
  // unchanged before the group kernel existed).
  const PlanEnv env("group=1");
  Rng rng(test_seed(505));
  const Params prm(kTiny, m2::Options{kF32, false, true, true, true}, rng);
  const DevLayer layer(prm);
  const RingConfig cfg{8, 3, RingMode::kSpeculative};
  DevPool eager(kTiny, 8, cfg.rows(), kF32, kF32, rng), graphed(kTiny, 8, cfg.rows(), kF32, kF32, rng);
  random_start(eager, cfg, {0, 1, 2, 3, 4, 5, 6, 7}, rng);
  graphed.copy_from(eager);
  const int64_t batch = 6;
  DevTokens dev(prm, batch, cfg.T);
  DeviceBuffer y_eager(kF32, {batch, cfg.T, kTiny.H, kTiny.P}, 90);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  auto enqueue = [&](DevPool& pool, TensorView y, bool checks) {
    Rows rows = dev.rows(-1, true);
    rows.stream = stream;
    rows.check_device_ids = checks;
    mamba2::Cache cache = pool.cache();
    RingCursors cursors = pool.cursors(cfg);
    mamba2::verify(layer.layer, cache, cursors, dev.tokens(), rows, y);
    commit(cursors, rows, dev.acc.view());
  };
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  enqueue(graphed, dev.y.view(), false);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int step = 0; step < 60; ++step) {
    std::vector<int32_t> ids = {3, -1, 0, 6, 1, 5};
    rng.shuffle(ids);
    std::vector<int32_t> fed(batch), acc(batch);
    std::vector<std::vector<ref::Mamba2Token>> toks(batch);
    for (int64_t b = 0; b < batch; ++b) {
      fed[b] = static_cast<int32_t>(rng.integer(1, cfg.T));
      acc[b] = ids[b] < 0 ? 0 : static_cast<int32_t>(rng.integer(1, fed[b]));
      if (ids[b] >= 0)
        for (int t = 0; t < fed[b]; ++t) toks[b].push_back(prm.token(rng));
    }
    dev.put(toks, ids, fed);
    dev.acc.set_values(Vec(acc.begin(), acc.end()));
    enqueue(eager, y_eager.view(), true);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const Vec ye = y_eager.values(), yg = dev.y.values();
    for (size_t i = 0; i < ye.size(); ++i)
      if (!(std::isnan(ye[i]) && std::isnan(yg[i]))) {
        ASSERT_EQ(ye[i], yg[i]) << "step " << step << " y " << i;
      }
    ASSERT_EQ(eager.snapshot(), graphed.snapshot()) << "step " << step;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(Mamba2CudaVerify, BadArgumentsRaiseTypedErrorsAndTouchNothing) {
  RSSM_SKIP_WITHOUT_CUDA();
  Rng rng(test_seed(506));
  const Params prm(kTiny, m2::Options{}, rng);
  const DevLayer layer(prm);
  const RingConfig cfg{8, 4, RingMode::kSpeculative};
  DevPool pool(kTiny, 4, cfg.rows(), kF32, kF32, rng);
  random_start(pool, cfg, {0, 1, 2, 3}, rng);
  DevTokens dev(prm, 2, 4);
  std::vector<std::vector<ref::Mamba2Token>> toks(2);
  for (auto& r : toks)
    for (int t = 0; t < 4; ++t) r.push_back(prm.token(rng));
  const DevPool::Snapshot before = pool.snapshot();
  mamba2::Cache cache = pool.cache();
  auto run = [&] {
    mamba2::verify(layer.layer, cache, pool.cursors(cfg), dev.tokens(), dev.rows(-1, true), dev.y.view());
  };
  dev.put(toks, {1, 2}, {2, 5});  // 5 > T
  EXPECT_THROW(run(), SlotError);
  dev.put(toks, {1, 2}, {0, 2});  // 0 tokens
  EXPECT_THROW(run(), SlotError);
  dev.put(toks, {1, 1}, {2, 2});  // a slot twice
  EXPECT_THROW(run(), SlotError);
  dev.put(toks, {1, 2}, {2, 2});
  RingConfig decode_cfg{8, 1, RingMode::kDecode};
  EXPECT_THROW(mamba2::verify(layer.layer, cache, pool.cursors(decode_cfg), dev.tokens(),
                              dev.rows(-1, true), dev.y.view()),
               ConfigError);
  DevPool half(kTiny, 4, cfg.rows(), DType::kF16, kF32, rng);
  mamba2::Cache hc = half.cache();
  EXPECT_THROW(mamba2::verify(layer.layer, hc, half.cursors(cfg), dev.tokens(), dev.rows(-1, true),
                              dev.y.view()),
               UnsupportedError);
  EXPECT_EQ(pool.snapshot(), before) << "a rejected call touched the pool";
  // Accepted counts outside 1..T_b: the device commit rejects them, cursors unchanged.
  run();
  const DevPool::Snapshot ran = pool.snapshot();
  for (const std::vector<double>& bad : {Vec{0, 1}, Vec{3, 1}, Vec{-2, 1}}) {
    dev.acc.set_values(bad);
    RingCursors cursors = pool.cursors(cfg);
    EXPECT_THROW(commit(cursors, dev.rows(-1, true), dev.acc.view()), SlotError);
    EXPECT_EQ(pool.snapshot(), ran);
  }
}

// Limits of the CUDA kernels the public API cannot know: typed errors before anything runs.
TEST(Mamba2CudaVerify, CudaLimitsRaiseTypedErrors) {
  RSSM_SKIP_WITHOUT_CUDA();
  Rng rng(test_seed(510));
  auto expect_msg = [](auto&& fn, const char* type, const std::string& part) {
    try {
      fn();
      ADD_FAILURE() << "accepted; expected " << type << " naming " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  {  // ring_B in another dtype than ring_x (each alone passes the public API's checks)
    const Params prm(kTiny, m2::Options{kBF16, false, true, true, true}, rng);
    const DevLayer layer(prm);
    const RingConfig cfg{8, 2, RingMode::kSpeculative};
    DevPool pool(kTiny, 3, cfg.rows(), kF32, kF32, rng);
    DeviceBuffer ringB16(kBF16, {3, kTiny.G, cfg.rows(), kTiny.N}, 99);
    random_start(pool, cfg, {0, 1, 2}, rng);
    DevTokens dev(prm, 2, 2);
    dev.put({{prm.token(rng), prm.token(rng)}, {prm.token(rng), prm.token(rng)}}, {0, 2}, {2, 2});
    mamba2::Cache cache = pool.cache();
    cache.ring_B = ringB16.view();
    const DevPool::Snapshot before = pool.snapshot();
    EXPECT_THROW(mamba2::verify(layer.layer, cache, pool.cursors(cfg), dev.tokens(), dev.rows(-1, true),
                                dev.y.view()),
                 DTypeError);
    // a cursor without room for the row's tokens (the kernel would clamp it)
    Vec h = pool.h.values();
    h[2] = cfg.L - 1;
    pool.h.set_values(h);
    mamba2::Cache good = pool.cache();
    expect_msg([&] { mamba2::verify(layer.layer, good, pool.cursors(cfg), dev.tokens(), dev.rows(-1, true), dev.y.view()); },
               "SlotError", "cursors.h[2]");
    EXPECT_EQ(pool.snapshot()[0], before[0]);
    // a launch plan the group kernel cannot run (no streaming warp; hpb not dividing the group's
    // heads; an L2 distance it is not built for): a ConfigError naming the value, before anything
    // is written
    const std::pair<const char*, const char*> bads[] = {{"group=1,threads=64", "threads = 64"},
                                                        {"group=1,hpb=3", "hpb = 3"},
                                                        {"group=1,threads=100", "threads = 100"},
                                                        {"group=1,l2ahead=3", "l2ahead = 3"}};
    for (const auto& [bad, named] : bads) {
      const PlanEnv env(bad);
      dev.y.poison();
      const Vec y_before = dev.y.values();
      h[2] = 0;
      pool.h.set_values(h);
      mamba2::Cache c2 = pool.cache();
      expect_msg([&] { mamba2::verify(layer.layer, c2, pool.cursors(cfg), dev.tokens(), dev.rows(-1, true), dev.y.view()); },
                 "ConfigError", named);
      EXPECT_EQ(pool.snapshot()[0], before[0]);
      const Vec y_after = dev.y.values();
      EXPECT_EQ(std::memcmp(y_after.data(), y_before.data(), y_after.size() * sizeof(double)), 0);
    }
  }
  {  // headdim not a multiple of 8; a ring longer than 64
    const Shape odd{4, 12, 64, 2, "4x12x64"};
    const Params prm(odd, m2::Options{}, rng);
    const DevLayer layer(prm);
    for (int L : {8, 66}) {
      const RingConfig cfg{L, 2, RingMode::kSpeculative};
      DevPool pool(odd, 2, cfg.rows(), kF32, kF32, rng);
      random_start(pool, cfg, {0, 1}, rng);
      DevTokens dev(prm, 1, 2);
      dev.put({{prm.token(rng), prm.token(rng)}}, {1}, {2});
      mamba2::Cache cache = pool.cache();
      expect_msg([&] { mamba2::verify(layer.layer, cache, pool.cursors(cfg), dev.tokens(), dev.rows(-1, true), dev.y.view()); },
                 "UnsupportedError", L == 8 ? "headdim = 12" : "ring length L = 66");
    }
  }
}

// ---- the snapshot baseline ---------------------------------------------------------------------

TEST(Mamba2CudaSnapshot, SequentialStepsWithOneSnapshotPerTokenMatchOracle) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (const Shape& shape : {kTiny, kOdd}) {
    for (DType in : {kF32, kBF16}) {
      Rng rng(test_seed(507));
      const Params prm(shape, m2::Options{in, false, true, true, true}, rng);
      const DevLayer layer(prm);
      const int64_t T = 4, batch = 4, slots = 1 + batch * (T + 1);
      DeviceBuffer states(kF32, {slots, shape.H, shape.P, shape.N}, 91);
      Vec st(states.numel());
      for (double& v : st) v = rng.normal(0, 1);
      states.set_values(st);
      DevTokens dev(prm, batch, T);
      DeviceBuffer dst(DType::kI32, {batch, T}, 92), next(DType::kI32, {batch}, 93);
      std::vector<int32_t> ids = {2, -1, 0, 4};  // none is a snapshot slot
      std::vector<int32_t> fed = {4, 3, 1, 3};
      Vec vdst(batch * T);
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t t = 0; t < T; ++t) vdst[b * T + t] = static_cast<double>(1 + batch + b * T + t);
      vdst[3 * T + 1] = -1;  // a skipped snapshot
      dst.set_values(vdst);
      std::vector<std::vector<ref::Mamba2Token>> toks(batch);
      for (int64_t b = 0; b < batch; ++b)
        if (ids[b] >= 0)
          for (int t = 0; t < fed[b]; ++t) toks[b].push_back(prm.token(rng));
      dev.put(toks, ids, fed);
      dev.y.poison();
      const Vec before = states.values();
      cm::snapshot_verify(layer.layer, states.view(), dev.tokens(), dev.rows(-1, true), dst.view(),
                          dev.y.view());
      const Vec y = dev.y.values(), after = states.values();
      const int64_t n = shape.H * shape.P * shape.N, hp = shape.H * shape.P;
      std::vector<bool> written(slots, false);
      for (int64_t b = 0; b < batch; ++b) {
        if (ids[b] < 0) {
          for (int64_t i = 0; i < T * hp; ++i) ASSERT_EQ(y[b * T * hp + i], 0.0);
          continue;
        }
        Vec S(before.begin() + ids[b] * n, before.begin() + (ids[b] + 1) * n), Sa = absv(S);
        ref::Mamba2Params pa = prm.ref;
        pa.D = absv(pa.D);
        for (int64_t t = 0; t < T; ++t) {
          const int64_t off = (b * T + t) * hp;
          if (t >= fed[b]) {
            for (int64_t i = 0; i < hp; ++i) ASSERT_EQ(y[off + i], 0.0);
            continue;
          }
          const Vec yr = ref::mamba2_conventional_step(prm.ref, S, toks[b][t]);
          const Vec ya = ref::mamba2_conventional_step(pa, Sa, abs_token(toks[b][t]));
          const double k = static_cast<double>(shape.N + 32 + 8 * (t + 1));
          for (int64_t i = 0; i < hp; ++i) {
            const double gate = std::abs(m2::silu(toks[b][t].z[i]));
            double tol = kU * k * ya[i] * gate;
            if (in == kBF16) tol += m2::kBf16Out * (std::abs(yr[i]) + tol);
            ASSERT_LE(std::abs(y[off + i] - yr[i]), tol) << shape.name << " row " << b << " token " << t;
          }
          const int32_t d = static_cast<int32_t>(vdst[b * T + t]);
          if (d < 0) continue;
          written[d] = true;
          for (int64_t i = 0; i < n; ++i)
            ASSERT_LE(std::abs(after[d * n + i] - S[i]), kU * 8 * (t + 1) * Sa[i] + 1e-30)
                << "snapshot of row " << b << " token " << t;
        }
      }
      for (int64_t sl = 0; sl < slots; ++sl)
        if (!written[sl]) {
          for (int64_t i = 0; i < n; ++i) ASSERT_EQ(after[sl * n + i], before[sl * n + i]) << "slot " << sl;
        }
      // Rollback: the next step reads the snapshot of the last accepted token.
      dev.acc.set_values({2, 0, 1, 3});
      next.poison();
      cuda::snapshot_select(dev.rows(-1, true), slots, dst.view(), dev.acc.view(), next.view());
      const Vec nx = next.values();
      EXPECT_EQ(nx[0], vdst[0 * T + 1]);
      EXPECT_EQ(nx[1], -1);
      EXPECT_EQ(nx[2], vdst[2 * T + 0]);
      EXPECT_EQ(nx[3], vdst[3 * T + 2]);
      dev.acc.set_values({5, 0, 1, 1});  // 5 > T_b
      EXPECT_THROW(cuda::snapshot_select(dev.rows(-1, true), slots, dst.view(), dev.acc.view(), next.view()),
                   SlotError);
      ASSERT_TRUE(states.guards_intact() && dev.y.guards_intact() && next.guards_intact());
      // A snapshot slot that is another row's source, or written twice: SlotError, nothing run.
      for (const int at : {1, 9}) {
        Vec bad = vdst;
        bad[at] = at == 1 ? 4 : vdst[2 * T];  // row 3's source; row 2's first snapshot again
        dst.set_values(bad);
        const Vec st0 = states.values();
        EXPECT_THROW(cm::snapshot_verify(layer.layer, states.view(), dev.tokens(), dev.rows(-1, true),
                                         dst.view(), dev.y.view()),
                     SlotError);
        EXPECT_EQ(states.values(), st0);
      }
    }
  }
}

}  // namespace
}  // namespace replayssm::testing::cuda_test

#else
TEST(Mamba2CudaVerify, SkippedWithoutCudaBackend) { GTEST_SKIP() << "built without the CUDA backend"; }
#endif
