// CPU conventional GDN/KDA step and slot reset.
#include "gdn_cpu.h"

#include <cstring>
#include <vector>

#include "gdn_cpu_math.h"

namespace replayssm::gdn::cpu {

void conventional_step(const Call& c) {
  const Geometry geo(c);
  const int64_t batch = static_cast<int64_t>(c.slots.size());
  float* state = c.cache->state.ptr<float>();
#pragma omp parallel if (geo.parallel(batch))
  {
    std::vector<float> khat(geo.K), qhat(geo.K), g(geo.gw), alpha(geo.K), ak(geo.K);
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
      const int64_t v_off = geo.v_off(b, 0, vh);
      for (int64_t r = 0; r < geo.V; ++r) {
        const float y = update_row(S + r * geo.K, alpha.data(), ak.data(), khat.data(), qhat.data(),
                                   geo.K, beta, load_f32(c.in.v, v_off + r));
        store_f32(c.y, y_off + r, y);
      }
    }
  }
}

void reset_slots(const TensorView& state, const std::vector<int32_t>& slots, int32_t pad_slot_id) {
  const int64_t per_slot = state.shape[1] * state.shape[2] * state.shape[3];
  for (int32_t s : slots)
    if (s != pad_slot_id)
      std::memset(state.ptr<float>() + s * per_slot, 0, per_slot * sizeof(float));
}

}  // namespace replayssm::gdn::cpu
