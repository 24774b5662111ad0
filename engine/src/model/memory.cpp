// Mirrors the per-slot allocations of the CUDA mixers (cuda/*_mixer.cpp) and, for what only the CPU
// engine runs (GDN split modes, the snapshot baseline), of the CPU ones (model/gdn_mixer.cpp,
// model/snapshots.h); tests/engine/test_bench_support.cpp checks it against models.md §1.
#include "replayssm/engine/memory.h"

#include "model/checks.h"
#include "model/state_store.h"
#include "replayssm/precision.h"

namespace replayssm::engine {

SequenceBytes sequence_bytes(const ModelConfig& cfg, const ModelOptions& options) {
  const ModelOptions o = resolve_options(cfg, options);
  const StateMode mode = engine_state_mode(o.state);
  const bool replay = o.ssm == SsmMode::kReplay;
  const bool snapshot = !replay && o.spec_T > 0;
  // The CUDA engine's 16-bit states ("bf16" / "fp16") store the state in 2 bytes.
  const int64_t state16 = o.state == "bf16" || o.state == "fp16" ? 2 : 0;
  const int64_t R = o.ring_L;
  SequenceBytes s;
  for (const BlockKind k : cfg.layers) {
    if (k == BlockKind::kMamba2) {
      const Mamba2Config& m = cfg.mamba;
      const int64_t n = m.nheads * m.headdim * m.d_state;
      s.ssm_state += state16 ? state16 * n : state_bytes(mode, m.nheads, m.headdim, m.d_state).total();
      if (replay) s.ssm_ring += 4 * R * (m.nheads * m.headdim + m.nheads + m.ngroups * m.d_state);
      if (snapshot) s.snapshots += 4 * int64_t{o.spec_T} * n;
      s.conv += 4 * m.conv_dim() * m.conv_kernel;
    } else if (k == BlockKind::kGdn) {
      const GdnConfig& g = cfg.gdn;
      const int64_t n = g.num_v_heads * g.head_v_dim * g.head_k_dim;
      s.ssm_state +=
          state16 ? state16 * n : state_bytes(mode, g.num_v_heads, g.head_v_dim, g.head_k_dim).total();
      if (replay) {
        int64_t rec = g.num_v_heads * g.head_v_dim + g.num_k_heads * g.head_k_dim + g.num_v_heads;
        if (mode.is_split()) rec += g.num_v_heads * g.head_v_dim + g.num_v_heads;
        s.ssm_ring += 4 * R * rec;
      }
      if (snapshot) s.snapshots += 4 * int64_t{o.spec_T} * n;
      s.conv += 4 * g.conv_dim() * g.conv_kernel;
    } else if (k == BlockKind::kAttention) {
      s.kv_cache += 2 * 2 * cfg.attn.num_kv_heads * cfg.attn.head_dim * int64_t{o.max_context};
    }
  }
  return s;
}

}  // namespace replayssm::engine
