// Mixture-of-experts blocks (models.md §2.3 Nemotron-H, §2.4-2.5 Qwen3-Next / Qwen3.5).
// Nemotron-H: sigmoid router with e_score_correction_bias for the choice (grouped top-k when
//   n_group > 1), weights = sigmoid scores (normalised if norm_topk_prob) * routed_scaling_factor;
//   relu2 experts (up, down), optionally between fc1_latent_proj / fc2_latent_proj; plus the
//   shared experts' relu2 MLP on the full-width input.
// Qwen: softmax router (float32), top-k, renormalised if norm_topk_prob; SwiGLU experts; plus the
//   shared expert's SwiGLU scaled by sigmoid(shared_expert_gate(x)).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "cpu/ops.h"
#include "model/mixer.h"
#include "replayssm/engine/checkpoint.h"

namespace replayssm::engine {

struct ExpertWeights {
  cpu::Linear up, gate, down;  ///< gate only for SwiGLU experts
};

struct MoeWeights {
  cpu::Linear router;                    ///< gate.weight [E, hidden]
  std::vector<float> correction_bias;    ///< [E], Nemotron-H only
  std::vector<ExpertWeights> experts;    ///< E experts
  ExpertWeights shared;                  ///< up.out == 0 when there is no shared expert
  cpu::Linear shared_gate;               ///< Qwen shared_expert_gate [1, hidden]
  cpu::Linear fc1_latent, fc2_latent;    ///< Nemotron LatentMoE (out == 0: none)
};

/// Loads `prefix` ("...mixer." for Nemotron-H, "...mlp." for Qwen). Qwen3.5-MoE's fused 3-D
/// experts (experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I]) are split on load.
MoeWeights load_moe_weights(const Checkpoint& ck, const ModelConfig& cfg, const std::string& prefix);

/// The routed experts of one token: indices into the experts and their weights (the order of the
/// pairs does not matter: the block sums the weighted expert outputs).
struct Routing {
  std::vector<int32_t> expert;
  std::vector<float> weight;
};
/// Router of one token from its router logits [E] (models.md §2.3 / §2.4).
Routing route_token(const float* logits, const float* correction_bias, const MoeConfig& cfg);

std::unique_ptr<Mixer> make_moe(const Checkpoint& ck, const ModelConfig& cfg,
                                const std::string& prefix);

}  // namespace replayssm::engine
