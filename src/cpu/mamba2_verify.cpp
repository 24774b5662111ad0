// Mamba-2 speculative verify on the CPU, in the chunk form of DESIGN.md §2 / method.md §4.3:
//   O = S0 Q D + V (W . K^T Q)
// over the window of m = h + T_b records (committed history, then the row's tokens), with
// D = diag(exp(A P_{h+s})) and W[l, s] = delta_l exp(A (P_{h+s} - P_l)) for l <= h+s, else 0.
// Flush rows then fold only the committed history into the checkpoint.
#include <algorithm>
#include <vector>

#include "cpu/mamba2_cpu.h"
#include "cpu/mamba2_cpu_impl.h"

namespace replayssm::cpu::mamba2 {

void verify(const Layer& layer, Cache& cache, const RingCursors& cursors, const Tokens& in,
            const HostRows& rows, const TensorView& y) {
  const int64_t R = cursors.config.rows();
  const Geo geo(layer, in, y, R);
  const int64_t H = geo.H, P = geo.P, N = geo.N, G = geo.G, T = geo.T, batch = rows.batch();
  const float* D = layer.D.empty() ? nullptr : layer.D.ptr<const float>();
  float* state = cache.state.ptr<float>();
  float* ring_x = cache.ring_x.ptr<float>();
  float* ring_dt = cache.ring_dt.ptr<float>();
  float* ring_B = cache.ring_B.ptr<float>();

  // Per (row, group): append the tokens' B at logical h..h+T_b-1 (once per group) and form
  // K^T Q [m x T_b], shared by the group's heads.
  std::vector<float> KtQ(static_cast<size_t>(batch * G * R * T));
  auto ktq = [&](int64_t b, int64_t g, int64_t l, int64_t s) -> float& {
    return KtQ[((b * G + g) * R + l) * T + s];
  };
#pragma omp parallel if (worth_threads(batch * G * R * T * N))
  {
    std::vector<float> C(T * N);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < batch * G; ++i) {
      const int64_t b = i / G, g = i % G;
      if (rows.is_pad(b)) continue;
      const int32_t slot = rows.slot[b];
      const Cursor c = cursor_of(cursors, slot);
      const int64_t Tb = rows.num_tokens[b], m = c.h + Tb;
      for (int64_t s = 0; s < Tb; ++s) {
        load_row(in.C, geo.bc(b, s, g), N, &C[s * N]);
        load_row(in.B, geo.bc(b, s, g), N, ring_B + geo.ring_B(slot, g, ring_row(c, c.h + s, R)));
      }
      for (int64_t l = 0; l < m; ++l) {
        const float* Bl = ring_B + geo.ring_B(slot, g, ring_row(c, l, R));
        for (int64_t s = 0; s < Tb; ++s) ktq(b, g, l, s) = dot(Bl, &C[s * N], N);
      }
    }
  }

  const int64_t work = batch * H;
#pragma omp parallel if (worth_threads(work * P * N * T))
  {
    std::vector<float> C(T * N), S0C(T * P), out(P), z(P), row(N);
    std::vector<float> delta(R), cum(R), coef(R * T), decay(T), w(R);
    std::vector<const float*> xs(R), Bs(R);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < work; ++i) {
      const int64_t b = i / H, h = i % H, g = geo.group(h);
      if (rows.is_pad(b)) {
        for (int64_t s = 0; s < geo.Ty; ++s) zero_row(y, geo.y(b, s, h), P);
        continue;
      }
      const int32_t slot = rows.slot[b];
      const Cursor c = cursor_of(cursors, slot);
      const int64_t hist = c.h, Tb = rows.num_tokens[b], m = hist + Tb;
      const float A = head_A(layer, h);
      // Append the tokens' x and delta; the window's records are then read uniformly from the ring.
      for (int64_t s = 0; s < Tb; ++s) {
        const int64_t r = ring_row(c, hist + s, R);
        load_row(in.x, geo.x(b, s, h), P, ring_x + geo.ring_x(slot, h, r));
        ring_dt[geo.ring_dt(slot, h, r)] = head_scalars(layer, h, load_f32(in.dt, geo.dt(b, s, h))).delta;
      }
      for (int64_t l = 0; l < m; ++l) {
        const int64_t r = ring_row(c, l, R);
        delta[l] = ring_dt[geo.ring_dt(slot, h, r)];
        xs[l] = ring_x + geo.ring_x(slot, h, r);
        Bs[l] = ring_B + geo.ring_B(slot, g, r);
      }
      prefix_sums(delta.data(), m, cum.data());
      // D and the masked W . K^T Q, column s = token at logical position h + s.
      for (int64_t s = 0; s < Tb; ++s) {
        const int64_t t = hist + s;
        decay[s] = checkpoint_decay(A, cum.data(), t);
        for (int64_t l = 0; l <= t; ++l)
          coef[l * T + s] = record_weight(A, delta.data(), cum.data(), l, t) * KtQ[((b * G + g) * R + l) * T + s];
        load_row(in.C, geo.bc(b, s, g), N, &C[s * N]);
      }
      // S0 Q: one pass over the checkpoint for all T_b columns.
      const float* S0 = state + geo.state(slot, h);
      for (int64_t p = 0; p < P; ++p)
        for (int64_t s = 0; s < Tb; ++s) S0C[s * P + p] = dot(S0 + p * N, &C[s * N], N);
      for (int64_t s = 0; s < Tb; ++s) {
        const int64_t t = hist + s;
        for (int64_t p = 0; p < P; ++p) out[p] = decay[s] * S0C[s * P + p];
        for (int64_t l = 0; l <= t; ++l) {
          const float cf = coef[l * T + s];
          for (int64_t p = 0; p < P; ++p) out[p] += cf * xs[l][p];
        }
        if (!in.z.empty()) load_row(in.z, geo.x(b, s, h), P, z.data());
        for (int64_t p = 0; p < P; ++p)
          out[p] = finish(out[p], D, h, xs[t][p], in.z.empty() ? nullptr : &z[p]);
        store_row(y, geo.y(b, s, h), P, out.data());
      }
      for (int64_t s = Tb; s < geo.Ty; ++s) zero_row(y, geo.y(b, s, h), P);

      // Flush: fold the committed history 0..h-1 (never this step's tokens) into S0, written once.
      if (c.is_flush && hist > 0) {
        const float dk = checkpoint_decay(A, cum.data(), hist - 1);
        for (int64_t j = 0; j < hist; ++j) w[j] = record_weight(A, delta.data(), cum.data(), j, hist - 1);
        float* S = state + geo.state(slot, h);
        for (int64_t p = 0; p < P; ++p) {
          fold_row(row.data(), S + p * N, N, p, dk, w.data(), xs.data(), Bs.data(), hist);
          std::copy(row.begin(), row.end(), S + p * N);
        }
      }
    }
  }
}

}  // namespace replayssm::cpu::mamba2
