// Mirrors the per-slot allocations of the CUDA mixers (cuda/*_mixer.cpp) and, for what only the CPU
// engine runs (GDN split modes, the snapshot baseline), of the CPU ones (model/gdn_mixer.cpp,
// model/snapshots.h); tests/engine/test_bench_support.cpp checks it against models.md §1.
#include "replayssm/engine/memory.h"

#include "model/checks.h"
#include "model/state_store.h"
#include "replayssm/precision.h"

namespace replayssm::engine {
namespace {

/// A layer's rolling conv state (C x k floats) and, with verify steps, what their rollback keeps
/// (the state before the step and the T inputs fed: cuda/mixers.h ConvBuffers).
int64_t conv_bytes(int64_t C, int64_t k, int32_t spec_T) {
  return 4 * (C * k + (spec_T > 0 ? C * k + int64_t{spec_T} * C : 0));
}

}  // namespace

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
      s.conv += conv_bytes(m.conv_dim(), m.conv_kernel, o.spec_T);
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
      s.conv += conv_bytes(g.conv_dim(), g.conv_kernel, o.spec_T);
    } else if (k == BlockKind::kAttention) {
      s.kv_cache += 2 * 2 * cfg.attn.num_kv_heads * cfg.attn.head_dim * int64_t{o.max_context};
    }
  }
  return s;
}

namespace {

int64_t linear(int64_t out, int64_t in, bool bias = false) { return out * in + (bias ? out : 0); }

int64_t expert(int64_t I, int64_t in, bool gated, bool bias) {
  return linear(I, in, bias) * (gated ? 2 : 1) + linear(in, I, bias);
}

int64_t mixer_params(const ModelConfig& cfg, BlockKind kind) {
  const int64_t H = cfg.hidden_size;
  switch (kind) {
    case BlockKind::kMamba2: {
      const Mamba2Config& m = cfg.mamba;
      const int64_t di = m.d_inner(), cd = m.conv_dim();
      return linear(2 * di + 2 * m.ngroups * m.d_state + m.nheads, H, m.proj_bias) +
             cd * m.conv_kernel + (m.use_conv_bias ? cd : 0) + 3 * m.nheads + di +
             linear(H, di, m.proj_bias);
    }
    case BlockKind::kGdn: {
      const GdnConfig& g = cfg.gdn;
      const int64_t k = g.num_k_heads * g.head_k_dim, v = g.num_v_heads * g.head_v_dim;
      const int64_t in = g.interleaved_proj
                             ? linear(2 * k + 2 * v, H) + linear(2 * g.num_v_heads, H)
                             : linear(g.conv_dim(), H) + linear(v, H) + 2 * linear(g.num_v_heads, H);
      return in + g.conv_dim() * g.conv_kernel + 2 * g.num_v_heads + g.head_v_dim + linear(H, v);
    }
    case BlockKind::kAttention: {
      const AttentionConfig& a = cfg.attn;
      const int64_t q = a.num_heads * a.head_dim, kv = a.num_kv_heads * a.head_dim;
      return linear(q * (a.output_gate ? 2 : 1), H, a.bias) + 2 * linear(kv, H, a.bias) +
             linear(H, q, a.bias) + (a.qk_norm ? 2 * a.head_dim : 0);
    }
    case BlockKind::kMlp:
      return expert(cfg.mlp.intermediate, H, cfg.mlp.gated, cfg.mlp.bias);
    case BlockKind::kMoe: {
      const MoeConfig& m = cfg.moe;
      const bool qwen = !m.sigmoid_router, bias = cfg.mlp.bias;
      const int64_t width = m.latent_size > 0 ? m.latent_size : H;
      int64_t n = linear(m.num_experts, H) + (m.sigmoid_router ? m.num_experts : 0);
      if (m.latent_size > 0) n += linear(m.latent_size, H, bias) + linear(H, m.latent_size, bias);
      n += m.num_experts * expert(m.expert_intermediate, width, qwen, bias);
      if (m.shared_intermediate > 0)
        n += expert(m.shared_intermediate, H, qwen, bias) + (qwen ? linear(1, H) : 0);
      return n;
    }
  }
  return 0;
}

}  // namespace

int64_t parameter_count(const ModelConfig& cfg) {
  const int64_t H = cfg.hidden_size;
  const bool qwen = cfg.arch == Arch::kQwen3Next || cfg.arch == Arch::kQwen35;
  int64_t n = cfg.vocab_size * H * (cfg.tie_word_embeddings ? 1 : 2) + H;  // + final norm
  for (size_t i = 0; i < cfg.layers.size(); ++i) {
    n += H + mixer_params(cfg, cfg.layers[i]);  // pre-norm + mixer
    if (qwen) n += H + mixer_params(cfg, cfg.qwen_mlp.at(i));
  }
  return n;
}

}  // namespace replayssm::engine
