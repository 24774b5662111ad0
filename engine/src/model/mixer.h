// The pieces a decode step runs per layer. A mixer maps the normalised hidden rows of a batch to
// its residual contribution; per-sequence state lives in the mixer, indexed by slot.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "replayssm/engine/config.h"
#include "replayssm/engine/model.h"
#include "replayssm/ring.h"

namespace replayssm::engine {

class Checkpoint;

/// The rows of one step.
struct Batch {
  int64_t n = 0;                  ///< rows
  const int32_t* slots = nullptr; ///< [n] slot of each row (distinct)
  const int64_t* pos = nullptr;   ///< [n] position of this row's token in its sequence
  /// Library views of the slots (int32 [n]) for the SSM ops and ring commit.
  Rows rows;
};

/// What the SSM mixers share: the mode, and (replay) the ring cursors of all slots, committed
/// once per step by the model after every layer ran.
struct SsmShared {
  SsmMode mode = SsmMode::kReplay;
  RingCursors cursors;  ///< host views; meaningful in replay mode
  double dt_floor = 0.0;
};

class Mixer {
 public:
  virtual ~Mixer() = default;
  /// x [B, hidden] (normalised input) -> out [B, hidden].
  virtual void forward(const float* x, float* out, const Batch& batch) = 0;
  /// Zeroes the per-sequence state of a slot (conv state, SSM state, ring, KV cache).
  virtual void reset(const Rows& rows) = 0;
};

/// Loaders: `prefix` is the module path (e.g. "backbone.layers.3.mixer.").
std::unique_ptr<Mixer> make_mamba2_mixer(const Checkpoint& ck, const ModelConfig& cfg,
                                         const std::string& prefix, const ModelOptions& opt,
                                         SsmShared& ssm);
std::unique_ptr<Mixer> make_gdn_mixer(const Checkpoint& ck, const ModelConfig& cfg,
                                      const std::string& prefix, const ModelOptions& opt,
                                      SsmShared& ssm);
std::unique_ptr<Mixer> make_attention(const Checkpoint& ck, const ModelConfig& cfg,
                                      const std::string& prefix, const ModelOptions& opt);
/// relu2 (Nemotron-H: up_proj, down_proj) or SwiGLU (Qwen: gate_proj, up_proj, down_proj).
std::unique_ptr<Mixer> make_mlp(const Checkpoint& ck, const ModelConfig& cfg,
                                const std::string& prefix);

}  // namespace replayssm::engine
