// Where a model's tensors live in a Hugging Face checkpoint (models.md §2): the module root, the
// embedding, each sub-layer's pre-norm and mixer prefix, the final norm and the lm_head. Shared by
// the CPU and CUDA models so both walk the same layers with the same weight names.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "replayssm/engine/checkpoint.h"
#include "replayssm/engine/config.h"

namespace replayssm::engine {

/// One residual sub-block: h += mixer(norm(h)).
struct SublayerSpec {
  BlockKind kind = BlockKind::kMlp;
  int64_t layer = 0;    ///< index of the decoder layer it belongs to
  std::string norm;     ///< pre-norm weight [hidden], e.g. "backbone.layers.3.norm.weight"
  std::string prefix;   ///< mixer module path, e.g. "backbone.layers.3.mixer."
};

struct ModelLayout {
  std::string root;        ///< "backbone." / "model." / "model.language_model."
  std::string embed;       ///< embedding weight [vocab, hidden]
  std::string final_norm;  ///< final norm weight [hidden]
  std::string lm_head;     ///< lm_head weight [vocab, hidden]; empty when tied to the embedding
  /// Nemotron-H / Mamba2: one per layer. Qwen: two per layer (token mixer, then MLP or MoE).
  std::vector<SublayerSpec> sub;
};

/// The layout of ck for cfg. Checkpoints spell the module root differently (save_pretrained of a
/// class vs the published files): the configured prefix wins if its embedding exists, else the
/// first that does. Errors: CheckpointError (no embedding under any known prefix).
ModelLayout model_layout(const Checkpoint& ck, const ModelConfig& cfg);

}  // namespace replayssm::engine
