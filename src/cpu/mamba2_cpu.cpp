// Mamba-2 decode on the CPU: the conventional step, the ReplaySSM step (ordinary output-only
// route and flush) and slot reset. Arguments were validated by the host API.
// State modes (precision.h): fp32/fp32 works on `state` in place. Other modes run the same
// arithmetic on a float32 copy of the (slot, head): the conventional step of a shared baseline
// decodes the state, updates it and re-encodes it; a split-mode flush decodes the checkpoint,
// folds, re-encodes it and derives the read copy from the stored checkpoint; a split-mode
// ordinary step reads the decoded read copy in place of S0.
#include "cpu/mamba2_cpu.h"

#include <algorithm>
#include <vector>

#include "cpu/mamba2_cpu_impl.h"
#include "cpu/state_io.h"

namespace replayssm::cpu::mamba2 {
namespace {

const float* opt_ptr(const TensorView& t) { return t.empty() ? nullptr : t.ptr<const float>(); }

state_io::Geo state_geo(const Geo& geo) { return state_io::Geo{geo.H, geo.P, geo.N}; }

/// The SR key of a slot's write (zero key when the mode draws no random bits).
state_io::SrDraw sr_of(const Cache& cache, int32_t slot) {
  return cache.mode.uses_sr() ? state_io::sr_draw(cache.sr, slot) : state_io::SrDraw{};
}

/// Advances the SR step counter of every real row's slot that was written (rows with `wrote`).
template <class Wrote>
void advance_sr(const Cache& cache, const HostRows& rows, Wrote wrote) {
  if (!cache.mode.uses_sr()) return;
  for (int64_t b = 0; b < rows.batch(); ++b)
    if (!rows.is_pad(b) && wrote(rows.slot[b])) state_io::sr_advance(cache.sr, rows.slot[b]);
}

}  // namespace

void conventional_step(const Layer& layer, Cache& cache, const Tokens& in, const HostRows& rows,
                       const TensorView& y) {
  const Geo geo(layer, in, y, 0);
  const int64_t H = geo.H, P = geo.P, N = geo.N;
  const float* D = opt_ptr(layer.D);
  float* state = cache.state.ptr<float>();
  const int64_t work = rows.batch() * H;
  const bool shared = cache.mode.shared;  // a shared baseline: decode, update, re-encode
  const StateBuffer sbuf{cache.state, cache.state_scales};
#pragma omp parallel if (worth_threads(work * P * N))
  {
    HeadToken tok(P, N);
    std::vector<float> out(P), head(shared ? P * N : 0);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < work; ++i) {
      const int64_t b = i / H, h = i % H;
      if (rows.is_pad(b)) {
        zero_row(y, geo.y(b, 0, h), P);
        continue;
      }
      tok.load(layer, in, geo, b, 0, h);
      const float a = std::exp(tok.s.delta * tok.s.A);
      float* S = state + geo.state(rows.slot[b], h);
      if (shared) {
        S = head.data();
        state_io::decode_head(cache.mode.read, sbuf, state_geo(geo), rows.slot[b], h, S);
      }
      for (int64_t p = 0; p < P; ++p) {
        const float acc = update_and_read(S + p * N, N, a, tok.s.delta * tok.x[p], tok.B.data(), tok.C.data());
        out[p] = finish(acc, D, h, tok.x[p], tok.z_at(p));
      }
      if (shared)
        state_io::encode_head(cache.mode.read, sbuf, state_geo(geo), rows.slot[b], h, S,
                              sr_of(cache, rows.slot[b]));
      store_row(y, geo.y(b, 0, h), P, out.data());
    }
  }
  advance_sr(cache, rows, [](int32_t) { return true; });
}

void replay_step(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
                 const HostRows& rows, const TensorView& y) {
  const int64_t R = cursors.config.rows();
  const Geo geo(layer, in, y, R);
  const int64_t H = geo.H, P = geo.P, N = geo.N, G = geo.G, batch = rows.batch();
  const float* D = opt_ptr(layer.D);
  float* state = cache.state.ptr<float>();
  float* ring_x = cache.ring_x.ptr<float>();
  float* ring_dt = cache.ring_dt.ptr<float>();
  float* ring_B = cache.ring_B.ptr<float>();

  // Per (row, group), ordinary rows: beta_j = B_j . C for the h history records and the current
  // token (index h), computed once and shared by the group's heads; the current B is appended to
  // the ring here, once per group.
  std::vector<float> beta(static_cast<size_t>(batch * G * R));
#pragma omp parallel if (worth_threads(batch * G * R * N))
  {
    std::vector<float> B(N), C(N);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < batch * G; ++i) {
      const int64_t b = i / G, g = i % G;
      if (rows.is_pad(b)) continue;
      const int32_t slot = rows.slot[b];
      const Cursor c = cursor_of(cursors, slot);
      if (c.is_flush) continue;
      load_row(in.B, geo.bc(b, 0, g), N, B.data());
      load_row(in.C, geo.bc(b, 0, g), N, C.data());
      float* bt = &beta[i * R];
      for (int64_t j = 0; j < c.h; ++j)
        bt[j] = dot(ring_B + geo.ring_B(slot, g, ring_row(c, j, R)), C.data(), N);
      bt[c.h] = dot(B.data(), C.data(), N);
      std::copy(B.begin(), B.end(), ring_B + geo.ring_B(slot, g, ring_row(c, c.h, R)));
    }
  }

  const int64_t work = batch * H;
  const StateMode& mode = cache.mode;
  const bool split = mode.is_split();
  const StateBuffer ckpt{cache.state, cache.state_scales};
  // What ordinary steps read: the read copy, or (fp16sr/fp16sr) the checkpoint itself.
  const StateBuffer& rd = mode.has_read_copy() ? cache.read : ckpt;
  const StateFormat rd_format = mode.has_read_copy() ? mode.read : mode.recurrence;
#pragma omp parallel if (worth_threads(work * P * N))
  {
    HeadToken tok(P, N);
    std::vector<float> out(P), row(N), head(split ? P * N : 0);
    std::vector<float> delta(R + 1), cum(R + 1), w(R + 1);
    std::vector<const float*> xs(R + 1), Bs(R + 1);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < work; ++i) {
      const int64_t b = i / H, h = i % H, g = geo.group(h);
      if (rows.is_pad(b)) {
        zero_row(y, geo.y(b, 0, h), P);
        continue;
      }
      const int32_t slot = rows.slot[b];
      const Cursor c = cursor_of(cursors, slot);
      const int64_t hist = c.h;
      tok.load(layer, in, geo, b, 0, h);
      const HeadScalars& hs = tok.s;
      const std::vector<float>& x = tok.x;
      for (int64_t j = 0; j < hist; ++j) {
        const int64_t r = ring_row(c, j, R);
        delta[j] = ring_dt[geo.ring_dt(slot, h, r)];
        xs[j] = ring_x + geo.ring_x(slot, h, r);
        Bs[j] = ring_B + geo.ring_B(slot, g, r);
      }
      float* S0 = state + geo.state(slot, h);
      if (split) {  // a float32 copy: the decoded checkpoint (flush) or read copy (ordinary)
        S0 = head.data();
        if (c.is_flush)
          state_io::decode_head(mode.recurrence, ckpt, state_geo(geo), slot, h, S0);
        else
          state_io::decode_head(rd_format, rd, state_geo(geo), slot, h, S0);
      }

      if (c.is_flush) {
        // Fold the history into the checkpoint row by row, then the current token through the
        // conventional update; each state row is written once.
        prefix_sums(delta.data(), hist, cum.data());
        const float decay = checkpoint_decay(hs.A, cum.data(), hist - 1);
        for (int64_t j = 0; j < hist; ++j) w[j] = record_weight(hs.A, delta.data(), cum.data(), j, hist - 1);
        const float a = std::exp(hs.delta * hs.A);
        for (int64_t p = 0; p < P; ++p) {
          fold_row(row.data(), S0 + p * N, N, p, decay, w.data(), xs.data(), Bs.data(), hist);
          const float acc = update_and_read(row.data(), N, a, hs.delta * x[p], tok.B.data(), tok.C.data());
          std::copy(row.begin(), row.end(), S0 + p * N);
          out[p] = finish(acc, D, h, x[p], tok.z_at(p));
        }
        if (split)  // write the checkpoint back and derive the read copy from it
          state_io::store_split_head(mode, ckpt, cache.read, state_geo(geo), slot, h, S0,
                                     sr_of(cache, slot), cursors.config.L);
      } else {
        // Output-only route: y = abar (S0 . C) + sum_j s_j beta_j x_j + D x; no state formed.
        delta[hist] = hs.delta;
        xs[hist] = x.data();
        prefix_sums(delta.data(), hist + 1, cum.data());
        const float abar = checkpoint_decay(hs.A, cum.data(), hist);
        const float* bt = &beta[(b * G + g) * R];
        for (int64_t j = 0; j <= hist; ++j)
          w[j] = record_weight(hs.A, delta.data(), cum.data(), j, hist) * bt[j];
        for (int64_t p = 0; p < P; ++p) out[p] = abar * dot(S0 + p * N, tok.C.data(), N);
        for (int64_t j = 0; j <= hist; ++j)
          for (int64_t p = 0; p < P; ++p) out[p] += w[j] * xs[j][p];
        for (int64_t p = 0; p < P; ++p) out[p] = finish(out[p], D, h, x[p], tok.z_at(p));
        const int64_t r = ring_row(c, hist, R);
        std::copy(x.begin(), x.end(), ring_x + geo.ring_x(slot, h, r));
        ring_dt[geo.ring_dt(slot, h, r)] = hs.delta;
      }
      store_row(y, geo.y(b, 0, h), P, out.data());
    }
  }
  if (split)
    advance_sr(cache, rows, [&](int32_t slot) { return cursor_of(cursors, slot).is_flush; });
}

void reset_slots(Cache& cache, const HostRows& rows) {
  if (!cache.mode.is_default()) {  // every buffer of the mode, and the SR step counter
    const StateMode& mode = cache.mode;
    const TensorView& st = cache.state;
    const int64_t n = st.shape[3] * (mode.state_format() == StateFormat::kNvfp4 ? 2 : 1);
    const state_io::Geo g{st.shape[1], st.shape[2], n};
    for (int64_t b = 0; b < rows.batch(); ++b) {
      if (rows.is_pad(b)) continue;
      state_io::zero_slot(mode.state_format(), StateBuffer{st, cache.state_scales}, g, rows.slot[b]);
      if (mode.has_read_copy()) state_io::zero_slot(mode.read, cache.read, g, rows.slot[b]);
      if (mode.uses_sr()) state_io::sr_reset(cache.sr, rows.slot[b]);
    }
    return;
  }
  const TensorView& st = cache.state;
  const int64_t per_slot = st.shape[1] * st.shape[2] * st.shape[3];
  float* state = cache.state.ptr<float>();
  const int64_t batch = rows.batch();
#pragma omp parallel for schedule(static) if (worth_threads(batch * per_slot))
  for (int64_t b = 0; b < batch; ++b)
    if (!rows.is_pad(b)) std::fill_n(state + rows.slot[b] * per_slot, per_slot, 0.0f);
}

}  // namespace replayssm::cpu::mamba2
