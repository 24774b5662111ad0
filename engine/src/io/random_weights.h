// Values of the synthetic checkpoint (Checkpoint::random): a tensor's pseudo-random contents as a
// function of (seed, name, index), at the scale a trained model's tensor of that name has.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace replayssm::engine {

/// Whether a synthetic checkpoint holds `name`: every tensor a loader asks for, in the layout of
/// the per-expert MoE exports (experts.E.gate_proj ...), not the fused 3-D Qwen3.5-MoE one
/// (experts.gate_up_proj / experts.down_proj): loaders probe for that one with has(), and the
/// per-expert layout is the one every architecture has.
bool random_has(const std::string& name);

/// The float32 contents of tensor `name` with `shape`. qwen_norm: the model's RMSNorms scale by
/// (1 + w) (Qwen), so their weights are drawn near 0 instead of near 1 (the GDN gated norm,
/// "linear_attn.norm.weight", scales by w in every model).
std::vector<float> random_tensor(const std::string& name, const std::vector<int64_t>& shape,
                                 uint64_t seed, bool qwen_norm);

}  // namespace replayssm::engine
