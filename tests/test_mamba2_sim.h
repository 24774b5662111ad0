// Sim: drives the Mamba-2 CPU ops over a guarded slot pool and checks every call against the fp64
// oracle and against sequential (conventional) decoding of each sequence's committed stream,
// with the error bounds derived in test_mamba2_util.h. Every call also checks: guards intact,
// cursors only read, slots outside the batch byte-identical, pad rows and entries past T_b
// exactly 0, ring contents at the live positions, no state write outside a flush. Optionally a
// shadow pool runs conventional_step on the same stream (bit-identical at L = 1) and every call
// is repeated from the same inputs (bit-identical).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "test_mamba2_util.h"

namespace replayssm::testing::m2 {

enum class Op { kConventional, kReplay, kVerify };

inline const char* op_name(Op op) {
  return op == Op::kConventional ? "conventional_step" : op == Op::kReplay ? "replay_step" : "verify";
}

/// One batch row of a step: the sequence it feeds (-1: pad row), its token count, how many of
/// them the target accepts, and optionally an earlier row of the step whose tokens it copies.
struct RowPlan {
  int seq = -1;
  int Tb = 1;
  int accept = 1;
  int twin = -1;
};

/// One sequence living in a slot, with its references.
struct Seq {
  int32_t slot = -1;
  ref::Mamba2Seq rs;  ///< oracle replay cache (checkpoint, ring, cursor)
  Vec S;              ///< oracle conventional state of the committed stream
  Vec M, bconv;       ///< magnitude state; budget of a float32 conventional state (units of u)
  Vec bckpt;          ///< budget of the float32 checkpoint (units of u)
  std::deque<ref::Mamba2Token> upcoming;  ///< the stream's next true tokens
  int64_t committed = 0;
};

class Sim {
 public:
  struct Config {
    Shape shape = kSmall;
    Options opt;
    RingConfig ring{4, 1, RingMode::kDecode};
    int64_t slots = 8;
    bool rank3 = false;   ///< decode ops: token tensors without the T axis
    bool shadow = false;  ///< also run conventional_step on a second pool (same stream)
    bool repeat = false;  ///< run every call twice from the same inputs, compare bytes
    int32_t pad_id = -1;
  };

  Sim(const Config& c, uint64_t seed)
      : cfg_(c), rng_(seed), prm_(c.shape, c.opt, rng_), pool_(c.shape, c.slots, c.ring, rng_),
        shadow_(c.shape, c.shadow ? c.slots : 0, c.ring, rng_) {}

  Rng& rng() { return rng_; }
  const Params& params() const { return prm_; }
  Pool& pool() { return pool_; }
  Seq& seq(int i) { return seqs_[i]; }
  int64_t flushes() const { return flushes_; }
  /// Bytes of y[b, t, :, :] from the last call.
  std::vector<uint8_t> last_y(int64_t b, int64_t t) const {
    const size_t row = static_cast<size_t>(cfg_.shape.H * cfg_.shape.P * dtype_size(cfg_.opt.dtype));
    const size_t off = static_cast<size_t>(b * last_T_ + t) * row;
    return std::vector<uint8_t>(last_y_.begin() + off, last_y_.begin() + off + row);
  }
  std::string describe() const { return m2::describe(cfg_.shape, cfg_.opt, cfg_.ring); }

  /// Start a sequence in `slot` (fresh or reused): garbage in the slot's ring rows, then
  /// reset_slots + replayssm::reset. Returns the sequence index.
  int start(int32_t slot) {
    const Shape& s = cfg_.shape;
    for (Pool* p : pools()) {
      for (int64_t r = 0; r < p->R; ++r) p->fill_row(s, slot, r, static_cast<float>(rng_.normal(0, 100)));
      int32_t id = slot;
      Rows rows;
      rows.slot_ids = make_view(&id, DType::kI32, {1});
      mamba2::Cache cache = p->cache();
      mamba2::reset_slots(cache, rows);
      RingCursors cur = p->cursors(cfg_.ring);
      replayssm::reset(cur, rows);
    }
    const int64_t n = s.H * s.P * s.N;
    Seq q;
    q.slot = slot;
    q.rs = ref::mamba2_new_seq(prm_.ref, cfg_.ring);
    q.S = q.M = q.bconv = q.bckpt = Vec(n, 0.0);
    for (Seq& other : seqs_)
      if (other.slot == slot) other.slot = -1;  // that sequence is finished
    seqs_.push_back(std::move(q));
    return static_cast<int>(seqs_.size()) - 1;
  }

  /// A batch over the given sequences in random order with `pads` pad rows; T_b and the accepted
  /// count random in 1..T (decode: 1).
  std::vector<RowPlan> random_rows(const std::vector<int>& seqs, int pads) {
    std::vector<RowPlan> rows;
    for (int q : seqs) {
      RowPlan r;
      r.seq = q;
      r.Tb = static_cast<int>(rng_.integer(1, cfg_.ring.T));
      r.accept = static_cast<int>(rng_.integer(1, r.Tb));
      rows.push_back(r);
    }
    for (int i = 0; i < pads; ++i) rows.push_back(RowPlan{});
    rng_.shuffle(rows);
    return rows;
  }

  /// One call of `op` over the rows, every check, then the commit. False after any failure.
  bool step(Op op, const std::vector<RowPlan>& rows) {
    SCOPED_TRACE(std::string(op_name(op)) + " call " + std::to_string(calls_) + " (" + describe() + ")");
    ++calls_;
    const Shape& s = cfg_.shape;
    const int64_t batch = static_cast<int64_t>(rows.size());
    int64_t T = 1;
    if (op == Op::kVerify) {
      for (const RowPlan& r : rows) T = std::max<int64_t>(T, r.Tb);
      if (rng_.integer(0, 1)) T = cfg_.ring.T;  // a token axis wider than any row needs
    }

    // Tokens: the stream's true tokens up to the accepted count, garbage drafts after it.
    std::vector<std::vector<ref::Mamba2Token>> toks(batch);
    for (int64_t b = 0; b < batch; ++b) {
      const RowPlan& r = rows[b];
      if (r.seq < 0) continue;
      if (r.twin >= 0) {
        toks[b] = toks[r.twin];
        continue;
      }
      Seq& q = seqs_[r.seq];
      while (static_cast<int>(q.upcoming.size()) < r.accept) q.upcoming.push_back(prm_.token(rng_));
      for (int i = 0; i < r.Tb; ++i) toks[b].push_back(i < r.accept ? q.upcoming[i] : prm_.token(rng_));
    }

    Inputs& in = inputs(main_inputs_, batch, T, cfg_.rank3 && op != Op::kVerify);
    bool all_T = true;
    for (int64_t b = 0; b < batch; ++b) {
      const RowPlan& r = rows[b];
      in.slot_ids.data<int32_t>()[b] = r.seq < 0 ? cfg_.pad_id : seqs_[r.seq].slot;
      // Pad rows carry a meaningless count; it must be ignored.
      in.num_tokens.data<int32_t>()[b] = r.seq < 0 ? static_cast<int32_t>(rng_.integer(-3, 20)) : r.Tb;
      for (size_t t = 0; t < toks[b].size(); ++t) in.put(b, static_cast<int64_t>(t), toks[b][t]);
      all_T = all_T && (r.seq < 0 || r.Tb == T);
    }
    const bool pass_num_tokens = op == Op::kVerify && (!all_T || rng_.integer(0, 1));

    // Ring rows outside each row's live window hold NaN: any read of them poisons an output.
    if (op != Op::kConventional)
      for (const RowPlan& r : rows)
        if (r.seq >= 0) {
          const int32_t slot = seqs_[r.seq].slot;
          const Cursor c = pool_.cursor(slot);
          for (int64_t l = c.h; l < pool_.R; ++l) pool_.fill_row(s, slot, (c.origin + l) % pool_.R, NAN);
        }
    const auto before = pool_.snapshot();

    call(pool_, in, in.y, op, pass_num_tokens);
    if (cfg_.repeat) {
      const auto after = pool_.snapshot();
      const auto y1 = in.y.payload();
      pool_.restore(before);
      call(pool_, in, in.y, op, pass_num_tokens);
      EXPECT_TRUE(after == pool_.snapshot()) << "a repeated call left a different cache";
      EXPECT_TRUE(y1 == in.y.payload()) << "a repeated call gave different outputs";
    }

    EXPECT_TRUE(prm_.guards_intact()) << "guard bytes of a parameter overwritten";
    EXPECT_TRUE(pool_.guards_intact()) << "guard bytes of a cache buffer overwritten";
    EXPECT_TRUE(in.guards_intact()) << "guard bytes of an input/output buffer overwritten";
    const auto after = pool_.snapshot();
    for (size_t k = 4; k < 7; ++k) EXPECT_TRUE(before[k] == after[k]) << "the op changed a cursor";
    std::vector<bool> in_batch(cfg_.slots, false);
    for (const RowPlan& r : rows)
      if (r.seq >= 0) in_batch[seqs_[r.seq].slot] = true;
    for (int64_t sl = 0; sl < cfg_.slots; ++sl)
      EXPECT_TRUE(in_batch[sl] || pool_.slot_unchanged(s, sl, before))
          << "slot " << sl << " is not in the batch but changed";

    std::vector<RowRef> refs(batch);
    for (int64_t b = 0; b < batch; ++b) {
      const RowPlan& r = rows[b];
      EXPECT_TRUE(in.y_zero_from(b, r.seq < 0 ? 0 : r.Tb))
          << "row " << b << (r.seq < 0 ? " (pad)" : "") << ": outputs past its tokens are not 0";
      if (r.seq < 0) continue;
      SCOPED_TRACE("row " + std::to_string(b) + ", slot " + std::to_string(seqs_[r.seq].slot));
      refs[b] = check_row(op, seqs_[r.seq], toks[b], r.accept, in, b, before);
    }
    last_y_ = in.y.payload(), last_T_ = T;
    if (cfg_.shadow) run_shadow(op, rows, toks, in, refs);
    commit(op, rows, refs);
    return !::testing::Test::HasFailure();
  }

 private:
  /// What check_row learned about a row: the sequential references and the budgets after it.
  struct RowRef {
    std::vector<Vec> y_seq, M, bconv;  ///< per token, along the fed tokens
    Vec S_acc, M_acc, bconv_acc;       ///< after the accepted tokens
    bool flushed = false;
    Vec bckpt;  ///< the checkpoint budget after this call's flush
  };

  /// A cleared Inputs of this geometry, reused across calls (building guarded buffers is slow).
  Inputs& inputs(std::vector<std::unique_ptr<Inputs>>& cache, int64_t batch, int64_t T, bool rank3) {
    for (auto& in : cache)
      if (in->batch == batch && in->T == T && in->rank3 == rank3) {
        in->clear();
        return *in;
      }
    cache.push_back(std::make_unique<Inputs>(prm_, batch, T, rank3));
    return *cache.back();
  }

  std::vector<Pool*> pools() {
    if (cfg_.shadow) return {&pool_, &shadow_};
    return {&pool_};
  }
  double out_rel() const { return cfg_.opt.dtype == DType::kBF16 ? kBf16Out : 0.0; }

  void call(Pool& pool, const Inputs& in, GuardedBuffer& y, Op op, bool pass_num_tokens) {
    y.poison();
    mamba2::Cache cache = pool.cache();
    const RingCursors cur = pool.cursors(cfg_.ring);
    Rows rows;
    rows.slot_ids = in.slot_ids.view();
    rows.pad_slot_id = cfg_.pad_id;
    if (pass_num_tokens) rows.num_tokens = in.num_tokens.view();
    const mamba2::Tokens tk = in.tokens();
    const mamba2::Layer layer = prm_.layer();
    if (op == Op::kConventional) mamba2::conventional_step(layer, cache, tk, rows, y.view());
    if (op == Op::kReplay) mamba2::replay_step(layer, cache, cur, tk, rows, y.view());
    if (op == Op::kVerify) mamba2::verify(layer, cache, cur, tk, rows, y.view());
  }

  std::vector<double> state_of(const Pool& pool, int32_t slot) const {
    const Shape& s = cfg_.shape;
    const int64_t n = s.H * s.P * s.N, o = pool.state_at(s, slot);
    std::vector<double> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = pool.state.data<float>()[o + i];
    return v;
  }

  /// Outputs vs the oracle and sequential decoding, ring contents, checkpoint; returns the
  /// references commit() and the shadow need. Does not advance the sequence.
  RowRef check_row(Op op, Seq& q, const std::vector<ref::Mamba2Token>& toks, int accept,
                   const Inputs& in, int64_t b, const std::vector<std::vector<uint8_t>>& before) {
    const Shape& s = cfg_.shape;
    const int64_t Tb = static_cast<int64_t>(toks.size()), n = s.H * s.P * s.N;
    const Cursor c = q.rs.cursor;
    EXPECT_EQ(pool_.cursor(q.slot), c) << "pool cursor differs from the oracle's";

    // Sequential decoding of the row's tokens from the committed state, with budgets.
    RowRef rr;
    Vec S = q.S, M = q.M, bconv = q.bconv;
    for (int64_t t = 0; t < Tb; ++t) {
      advance(prm_, toks[t], M, bconv);
      rr.y_seq.push_back(ref::mamba2_conventional_step(prm_.ref, S, toks[t]));
      rr.M.push_back(M), rr.bconv.push_back(bconv);
      if (t + 1 == accept) rr.S_acc = S, rr.M_acc = M, rr.bconv_acc = bconv;
    }
    const Vec S_first = [&] {  // the sequential state after the first token
      Vec S1 = q.S;
      ref::mamba2_conventional_step(prm_.ref, S1, toks[0]);
      return S1;
    }();

    // The oracle op. It materialises by the same fold as the sequential steps, in the same
    // order, so it must equal sequential decoding exactly, not just within a tolerance.
    std::vector<Vec> deltas(Tb, Vec(s.H));
    for (int64_t t = 0; t < Tb; ++t)
      for (int64_t h = 0; h < s.H; ++h) deltas[t][h] = ref::mamba2_delta(prm_.ref, toks[t], h);
    std::vector<const Vec*> history;
    if (op != Op::kConventional)
      for (int64_t l = 0; l < c.h; ++l) history.push_back(&q.rs.ring[ref::ring_row(c, l, cfg_.ring)].delta);
    std::vector<Vec> y_ref;
    if (op == Op::kConventional) y_ref = rr.y_seq;
    if (op == Op::kReplay) y_ref.push_back(ref::mamba2_replay_step(prm_.ref, cfg_.ring, q.rs, toks[0]));
    if (op == Op::kVerify) y_ref = ref::mamba2_verify(prm_.ref, cfg_.ring, q.rs, toks);
    for (int64_t t = 0; t < Tb; ++t)
      EXPECT_TRUE(y_ref[t] == rr.y_seq[t]) << "oracle output differs from sequential decoding, token " << t;

    std::vector<const Vec*> window = history;
    for (int64_t t = 0; t < Tb; ++t) {
      Vec bound;
      if (op == Op::kConventional) {
        bound = y_bound(prm_, toks[t], y_ref[t], rr.bconv[t], Vec(s.H, 1.0), rr.M[t], Vec(s.H, s.N + 4.0), kU32);
      } else {
        window.push_back(&deltas[t]);
        Window w = window_of(prm_, window);
        for (double& k : w.k) k += static_cast<double>(s.N);
        bound = y_bound(prm_, toks[t], y_ref[t], q.bckpt, w.abar, rr.M[t], w.k, kU32);
      }
      const std::string e = within(in.y_row(b, t), y_ref[t], bound, out_rel());
      EXPECT_EQ(e, "") << "output of token " << t << (t < accept ? " (accepted)" : " (rejected draft)");
    }

    if (op != Op::kConventional) {
      int64_t live = c.h;  // history; plus the records this call appended
      if (op == Op::kReplay && !c.is_flush) live = c.h + 1;
      if (op == Op::kVerify) live = c.h + Tb;
      check_ring(q, c, live);
    }

    // The state: written by the conventional step and by flushes only.
    const std::vector<double> got = state_of(pool_, q.slot);
    if (op == Op::kConventional) {
      EXPECT_EQ(within(got, rr.S_acc, scaled(rr.bconv_acc, kU32), 0.0), "") << "state after the step";
      return rr;
    }
    if (!c.is_flush) {
      const size_t bytes = static_cast<size_t>(n) * 4, off = static_cast<size_t>(q.slot) * bytes;
      EXPECT_EQ(std::memcmp(pool_.state.data<uint8_t>() + off, before[0].data() + off, bytes), 0)
          << "an ordinary step wrote the checkpoint";
      return rr;
    }
    // Flush: decode folds history + token (= the state after this token); speculative only the
    // history (= the committed state before this step's tokens).
    const bool decode = cfg_.ring.mode == RingMode::kDecode;
    std::vector<const Vec*> folded = history;
    if (decode) folded.push_back(&deltas[0]);
    const Window w = window_of(prm_, folded);
    const Vec& Mf = decode ? rr.M[0] : q.M;
    rr.flushed = true;
    rr.bckpt.resize(n);
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = h * s.P * s.N; i < (h + 1) * s.P * s.N; ++i) rr.bckpt[i] = w.abar[h] * q.bckpt[i] + w.k[h] * Mf[i];
    EXPECT_TRUE(q.rs.S0 == (decode ? S_first : q.S)) << "oracle checkpoint differs from sequential decoding";
    EXPECT_EQ(within(got, q.rs.S0, scaled(rr.bckpt, kU32), 0.0), "")
        << "checkpoint after a flush of " << folded.size() << " records";
    return rr;
  }

  static Vec scaled(const Vec& v, double f) {
    Vec o(v.size());
    for (size_t i = 0; i < v.size(); ++i) o[i] = v[i] * f;
    return o;
  }
  static Vec sum(const Vec& a, const Vec& b) {
    Vec o(a.size());
    for (size_t i = 0; i < a.size(); ++i) o[i] = a[i] + b[i];
    return o;
  }

  /// The CPU ring rows at logical 0..live-1 against the oracle's: x and B are stored copies
  /// (exact); delta is a float32 softplus of a float32 sum, within (max(1, |dt'|) + 4) u.
  void check_ring(const Seq& q, const Cursor& c, int64_t live) {
    const Shape& s = cfg_.shape;
    for (int64_t l = 0; l < live; ++l) {
      const int64_t row = ref::ring_row(c, l, cfg_.ring);
      const ref::Mamba2Record& r = q.rs.ring[row];
      for (int64_t h = 0; h < s.H; ++h) {
        for (int64_t p = 0; p < s.P; ++p)
          if (pool_.ring_x.data<float>()[pool_.x_at(s, q.slot, h, row) + p] != static_cast<float>(r.x[h * s.P + p])) {
            ADD_FAILURE() << "ring_x at logical " << l << ", head " << h << ", p " << p << " differs";
            return;
          }
        const double d = r.delta[h];
        const double dtp = !prm_.opt.softplus || d > 20.0 ? d : std::log(std::expm1(d));  // dt'
        const double got = pool_.ring_dt.data<float>()[pool_.dt_at(s, q.slot, h, row)];
        if (!(std::abs(got - d) <= (std::max(1.0, std::abs(dtp)) + 4.0) * kU32 * d)) {
          ADD_FAILURE() << "ring_dt at logical " << l << ", head " << h << ": " << got << ", expected " << d;
          return;
        }
      }
      for (int64_t g = 0; g < s.G; ++g)
        for (int64_t k = 0; k < s.N; ++k)
          if (pool_.ring_B.data<float>()[pool_.B_at(s, q.slot, g, row) + k] != static_cast<float>(r.B[g * s.N + k])) {
            ADD_FAILURE() << "ring_B at logical " << l << ", group " << g << ", n " << k << " differs";
            return;
          }
    }
  }

  /// conventional_step on the shadow pool over the same stream: T = 1 calls, one per accepted
  /// position (rows with fewer accepted tokens are pad rows in the later calls).
  void run_shadow(Op op, const std::vector<RowPlan>& rows,
                  const std::vector<std::vector<ref::Mamba2Token>>& toks, const Inputs& in,
                  const std::vector<RowRef>& refs) {
    SCOPED_TRACE("shadow conventional_step");
    const Shape& s = cfg_.shape;
    const int64_t batch = static_cast<int64_t>(rows.size());
    const bool bitwise = op == Op::kReplay && cfg_.ring.L == 1;
    // Speculative flush: the checkpoint must match the committed state the shadow holds now.
    for (int64_t b = 0; b < batch; ++b)
      if (rows[b].seq >= 0 && refs[b].flushed && op == Op::kVerify) {
        const Seq& q = seqs_[rows[b].seq];
        EXPECT_EQ(within(state_of(pool_, q.slot), state_of(shadow_, q.slot),
                         scaled(sum(refs[b].bckpt, q.bconv), kU32), 0.0), "")
            << "checkpoint vs the conventional state at the same token count";
      }
    int max_acc = 0;
    for (const RowPlan& r : rows)
      if (r.seq >= 0) max_acc = std::max(max_acc, r.accept);
    for (int k = 0; k < max_acc; ++k) {
      Inputs& sub = inputs(shadow_inputs_, batch, 1, cfg_.rank3);
      for (int64_t b = 0; b < batch; ++b) {
        const RowPlan& r = rows[b];
        const bool fed = r.seq >= 0 && r.accept > k;
        sub.slot_ids.data<int32_t>()[b] = fed ? seqs_[r.seq].slot : cfg_.pad_id;
        if (fed) sub.put(b, 0, toks[b][k]);
      }
      call(shadow_, sub, sub.y, Op::kConventional, false);
      EXPECT_TRUE(shadow_.guards_intact() && sub.guards_intact());
      for (int64_t b = 0; b < batch; ++b) {
        const RowPlan& r = rows[b];
        const bool fed = r.seq >= 0 && r.accept > k;
        if (!fed) {
          EXPECT_TRUE(sub.y_zero_from(b, 0)) << "pad row " << b << " output not 0";
          continue;
        }
        const Seq& q = seqs_[r.seq];
        const RowRef& rr = refs[b];
        if (bitwise) {
          EXPECT_EQ(std::memcmp(sub.y.data<uint8_t>() + b * s.H * s.P * dtype_size(prm_.opt.dtype),
                                in.y.data<uint8_t>() + b * s.H * s.P * dtype_size(prm_.opt.dtype),
                                s.H * s.P * dtype_size(prm_.opt.dtype)), 0)
              << "L = 1 replay output is not bit-identical to the conventional step, row " << b;
          const int64_t o = shadow_.state_at(s, q.slot) * 4, bytes = s.H * s.P * s.N * 4;
          EXPECT_EQ(std::memcmp(shadow_.state.data<uint8_t>() + o, pool_.state.data<uint8_t>() + o, bytes), 0)
              << "L = 1 replay checkpoint is not bit-identical to the conventional state, row " << b;
          continue;
        }
        const Vec bound = y_bound(prm_, toks[b][k], rr.y_seq[k], rr.bconv[k], Vec(s.H, 1.0), rr.M[k],
                                  Vec(s.H, s.N + 4.0), kU32);
        EXPECT_EQ(within(sub.y_row(b, 0), rr.y_seq[k], bound, out_rel()), "") << "token " << k << ", row " << b;
        if (k + 1 == r.accept) {
          EXPECT_EQ(within(state_of(shadow_, q.slot), rr.S_acc, scaled(rr.bconv_acc, kU32), 0.0), "")
              << "conventional state, row " << b;
          if (rr.flushed && op == Op::kReplay) {
            EXPECT_EQ(within(state_of(pool_, q.slot), state_of(shadow_, q.slot),
                             scaled(sum(rr.bckpt, rr.bconv_acc), kU32), 0.0), "")
                << "checkpoint vs the conventional state at the same token count, row " << b;
          }
        }
      }
    }
  }

  /// replayssm::commit with the accepted counts, the oracle's commit, and the references advance
  /// along the accepted tokens.
  void commit(Op op, const std::vector<RowPlan>& rows, std::vector<RowRef>& refs) {
    const int64_t batch = static_cast<int64_t>(rows.size());
    if (op != Op::kConventional && batch > 0) {
      std::vector<int32_t> ids(batch), fed(batch), acc(batch);
      for (int64_t b = 0; b < batch; ++b) {
        const RowPlan& r = rows[b];
        ids[b] = r.seq < 0 ? cfg_.pad_id : seqs_[r.seq].slot;
        fed[b] = r.seq < 0 ? 1 : r.Tb;
        acc[b] = r.seq < 0 ? 0 : r.accept;
      }
      Rows rws;
      rws.slot_ids = make_view(ids.data(), DType::kI32, {batch});
      rws.pad_slot_id = cfg_.pad_id;
      if (op == Op::kVerify) rws.num_tokens = make_view(fed.data(), DType::kI32, {batch});
      RingCursors cur = pool_.cursors(cfg_.ring);
      replayssm::commit(cur, rws, make_view(acc.data(), DType::kI32, {batch}));
    }
    for (int64_t b = 0; b < batch; ++b) {
      const RowPlan& r = rows[b];
      if (r.seq < 0) continue;
      Seq& q = seqs_[r.seq];
      RowRef& rr = refs[b];
      if (op != Op::kConventional) {
        if (rr.flushed) q.bckpt = std::move(rr.bckpt), ++flushes_;
        q.rs.cursor = ref::commit(q.rs.cursor, r.accept, cfg_.ring);
        EXPECT_EQ(pool_.cursor(q.slot), q.rs.cursor) << "cursor after commit, row " << b;
      }
      q.S = std::move(rr.S_acc), q.M = std::move(rr.M_acc), q.bconv = std::move(rr.bconv_acc);
      q.committed += r.accept;
      if (r.twin < 0)
        for (int i = 0; i < r.accept; ++i) q.upcoming.pop_front();
    }
  }

  Config cfg_;
  Rng rng_;
  Params prm_;
  Pool pool_, shadow_;
  std::vector<Seq> seqs_;
  int64_t calls_ = 0, flushes_ = 0;
  std::vector<uint8_t> last_y_;
  std::vector<std::unique_ptr<Inputs>> main_inputs_, shadow_inputs_;
  int64_t last_T_ = 1;
};

}  // namespace replayssm::testing::m2
