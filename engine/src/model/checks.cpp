#include "model/checks.h"

#include <algorithm>
#include <set>

#include "replayssm/dispatch.h"

namespace replayssm::engine {

int32_t auto_ring_length(const ModelConfig& cfg, int64_t batch) {
  int32_t L = 16;
  for (BlockKind k : cfg.layers) {
    if (k == BlockKind::kMamba2)
      L = std::min(L, recommended_ring_length(SsmFamily::kMamba2, batch, 16));
    if (k == BlockKind::kGdn) L = std::min(L, recommended_ring_length(SsmFamily::kGdn, batch, 16));
  }
  return L;
}

ModelOptions resolve_options(const ModelConfig& cfg, const ModelOptions& opt) {
  check<ConfigError>(opt.max_slots >= 1, "max_slots is ", opt.max_slots, ", expected >= 1");
  check<ConfigError>(opt.max_context >= 1, "max_context is ", opt.max_context,
                     ", expected >= 1");
  check<ConfigError>(opt.ring_L >= 0 && opt.ring_L <= 64, "ring length L is ", opt.ring_L,
                     ", expected 1..64 (0: the dispatcher's choice)");
  const bool half = opt.state == "bf16" || opt.state == "fp16";
  check<UnsupportedError>(opt.state == "fp32" || half, "state mode '", opt.state,
                          "' is not built (available: fp32; on CUDA also bf16, fp16)");
  check<UnsupportedError>(!half || opt.cuda, "state mode '", opt.state,
                          "' runs on the CUDA engine only (the CPU backend keeps fp32 state)");
  ModelOptions out = opt;
  if (out.ring_L == 0) out.ring_L = auto_ring_length(cfg, out.max_slots);
  return out;
}

void check_slot_ids(std::span<const int32_t> slots, int32_t max_slots) {
  std::set<int32_t> seen;
  for (int32_t s : slots) {
    check<SlotError>(s >= 0 && s < max_slots, "slot id ", s, " is outside [0, ", max_slots, ")");
    check<SlotError>(seen.insert(s).second, "slot id ", s, " appears twice in one step");
  }
}

void check_step(const ModelConfig& cfg, const ModelOptions& opt,
                const std::vector<int64_t>& position, std::span<const int32_t> tokens,
                std::span<const int32_t> slots, std::span<const float> logits) {
  const int64_t B = static_cast<int64_t>(slots.size()), V = cfg.vocab_size;
  check<ShapeError>(tokens.size() == slots.size(), "step: ", tokens.size(), " tokens for ",
                    slots.size(), " slots, expected one token per slot");
  check<ShapeError>(int64_t(logits.size()) == B * V, "step: logits hold ", logits.size(),
                    " floats, expected batch * vocab = ", B * V);
  check_slot_ids(slots, opt.max_slots);
  for (int64_t b = 0; b < B; ++b) {
    check<ConfigError>(tokens[b] >= 0 && tokens[b] < V, "token ", tokens[b], " is outside [0, ",
                       V, ")");
    check<SlotError>(position[slots[b]] < opt.max_context, "slot ", slots[b],
                     " is full: context ", opt.max_context, " tokens");
  }
}

}  // namespace replayssm::engine
