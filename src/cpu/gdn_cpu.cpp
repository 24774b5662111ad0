// CPU conventional GDN/KDA step and slot reset. A shared-baseline state mode (precision.h) runs
// the same update on a float32 copy of the (slot, value head): decode, update, re-encode.
#include "gdn_cpu.h"

#include <cstring>
#include <vector>

#include "cpu/state_io.h"
#include "gdn_cpu_math.h"

namespace replayssm::gdn::cpu {

namespace state_io = replayssm::cpu::state_io;

void conventional_step(const Call& c) {
  const Geometry geo(c);
  const int64_t batch = static_cast<int64_t>(c.slots.size());
  float* state = c.cache->state.ptr<float>();
  const StateMode& mode = c.cache->mode;
  const StateBuffer sbuf{c.cache->state, c.cache->state_scales};
  const state_io::Geo sg{geo.HV, geo.V, geo.K};
#pragma omp parallel if (geo.parallel(batch))
  {
    std::vector<float> khat(geo.K), qhat(geo.K), g(geo.gw), alpha(geo.K), ak(geo.K);
    std::vector<float> head(mode.shared ? geo.V * geo.K : 0);
#pragma omp for schedule(static)
    for (int64_t idx = 0; idx < batch * geo.HV; ++idx) {
      const int64_t b = idx / geo.HV, vh = idx % geo.HV;
      const int64_t y_off = geo.v_off(b, 0, vh);
      if (c.slots[b] == c.pad_slot_id) {
        for (int64_t r = 0; r < geo.V; ++r) store_f32(c.y, y_off + r, 0.0f);
        continue;
      }
      float beta;
      prep_token(geo, c, b, 0, vh, khat.data(), qhat.data(), g.data(), &beta);
      decay(geo, g.data(), khat.data(), alpha.data(), ak.data());
      float* S = state + geo.state_off(c.slots[b], vh);
      if (mode.shared) {
        S = head.data();
        state_io::decode_head(mode.read, sbuf, sg, c.slots[b], vh, S);
      }
      const int64_t v_off = geo.v_off(b, 0, vh);
      for (int64_t r = 0; r < geo.V; ++r) {
        const float y = update_row(S + r * geo.K, alpha.data(), ak.data(), khat.data(), qhat.data(),
                                   geo.K, beta, load_f32(c.in.v, v_off + r));
        store_f32(c.y, y_off + r, y);
      }
      if (mode.shared)
        state_io::encode_head(mode.read, sbuf, sg, c.slots[b], vh, S,
                              mode.uses_sr() ? state_io::sr_draw(c.cache->sr, c.slots[b])
                                             : state_io::SrDraw{});
    }
  }
  if (mode.uses_sr())
    for (int32_t s : c.slots)
      if (s != c.pad_slot_id) state_io::sr_advance(c.cache->sr, s);
}

void reset_slots(const TensorView& state, const std::vector<int32_t>& slots, int32_t pad_slot_id) {
  const int64_t per_slot = state.shape[1] * state.shape[2] * state.shape[3];
  for (int32_t s : slots)
    if (s != pad_slot_id)
      std::memset(state.ptr<float>() + s * per_slot, 0, per_slot * sizeof(float));
}

void reset_slots(const Cache& cache, const std::vector<int32_t>& slots, int32_t pad_slot_id) {
  const StateMode& mode = cache.mode;
  const TensorView& st = cache.state;
  const int64_t K = st.shape[3] * (mode.state_format() == StateFormat::kNvfp4 ? 2 : 1);
  const state_io::Geo g{st.shape[1], st.shape[2], K};
  for (int32_t s : slots) {
    if (s == pad_slot_id) continue;
    state_io::zero_slot(mode.state_format(), StateBuffer{st, cache.state_scales}, g, s);
    if (mode.has_read_copy()) state_io::zero_slot(mode.read, cache.read, g, s);
    if (mode.uses_sr()) state_io::sr_reset(cache.sr, s);
  }
}

}  // namespace replayssm::gdn::cpu
