#include "model/layout.h"

#include "replayssm/engine/errors.h"

namespace replayssm::engine {

ModelLayout model_layout(const Checkpoint& ck, const ModelConfig& cfg) {
  ModelLayout m;
  const std::vector<std::string> prefixes{cfg.weight_prefix, "backbone.", "model.",
                                          "model.language_model."};
  for (const auto& p : prefixes) {
    for (const char* e : {"embeddings.weight", "embed_tokens.weight", "embedding.weight"})
      if (ck.has(p + e)) {
        m.root = p;
        m.embed = p + e;
        break;
      }
    if (!m.embed.empty()) break;
  }
  if (m.embed.empty())
    throw CheckpointError(ck.dir() + ": missing tensor '" + cfg.weight_prefix +
                          "embeddings.weight' (no embedding under any known prefix)");

  const bool qwen = cfg.arch == Arch::kQwen3Next || cfg.arch == Arch::kQwen35;
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    const std::string lp = m.root + "layers." + std::to_string(i) + ".";
    const BlockKind kind = cfg.layers[i];
    const std::string mixer =
        lp + (qwen ? (kind == BlockKind::kGdn ? "linear_attn." : "self_attn.") : "mixer.");
    m.sub.push_back({kind, i, lp + (qwen ? "input_layernorm.weight" : "norm.weight"), mixer});
    if (qwen)
      m.sub.push_back({cfg.qwen_mlp.at(i), i, lp + "post_attention_layernorm.weight", lp + "mlp."});
  }
  m.final_norm = m.root + (qwen ? "norm.weight" : "norm_f.weight");
  if (!cfg.tie_word_embeddings) {
    // An untied model's output layer must be in the file: falling back to the embedding would
    // decode garbage without a word.
    check<CheckpointError>(ck.has("lm_head.weight"), ck.dir(),
                           ": missing tensor 'lm_head.weight' (tie_word_embeddings is false)");
    m.lm_head = "lm_head.weight";
  }
  return m;
}

}  // namespace replayssm::engine
