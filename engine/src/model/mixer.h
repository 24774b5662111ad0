// The pieces a decode step runs per layer. A mixer maps the normalised hidden rows of a batch to
// its residual contribution; per-sequence state lives in the mixer, indexed by slot.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "replayssm/engine/config.h"
#include "replayssm/engine/model.h"
#include "replayssm/precision.h"
#include "replayssm/ring.h"

namespace replayssm::engine {

class Checkpoint;

/// The rows of one step. A decode step feeds one token per row; a speculative verify step feeds
/// ntok[b] (1..T) tokens to row b, or none to a pad row (slot -1). Activations are packed: the
/// tokens of row b are rows off[b] .. off[b] + ntok[b] - 1 of a [tokens, hidden] matrix.
struct Batch {
  int64_t n = 0;                  ///< rows
  int64_t tokens = 0;             ///< activation rows: sum of ntok (n for a decode step)
  int64_t T = 1;                  ///< the widest row: the token axis of the SSM ops' views
  const int32_t* slots = nullptr; ///< [n] slot of each row (distinct); -1: pad row
  const int64_t* pos = nullptr;   ///< [n] position of the row's first token in its sequence
  const int32_t* ntok = nullptr;  ///< [n] tokens fed per row
  const int64_t* off = nullptr;   ///< [n] packed index of the row's first token
  /// A verify step: SSM layers run verify (replay) or the snapshot baseline (conventional) and
  /// keep what accept() needs to roll back.
  bool speculative = false;
  /// Library views of the slots (int32 [n], pad -1) and, when speculative, num_tokens (int32 [n]).
  Rows rows;
};

/// What the SSM mixers share: the mode, and (replay) the ring cursors of all slots, committed
/// once per step by the model after every layer ran.
struct SsmShared {
  SsmMode mode = SsmMode::kReplay;
  RingCursors cursors;  ///< host views; meaningful in replay mode
  double dt_floor = 0.0;
  /// Verify steps' T (ModelOptions::spec_T; 0: none). Conventional mode: snapshots per slot.
  int32_t spec_T = 0;
  /// State precision mode of every SSM layer (ModelOptions::state; fp32/fp32 by default).
  StateMode state_mode{};
  /// SSM layers built so far: each takes the next index (its SR seeds depend on it).
  int64_t ssm_layers = 0;
};

class Mixer {
 public:
  virtual ~Mixer() = default;
  /// x [B, hidden] (normalised input) -> out [B, hidden].
  virtual void forward(const float* x, float* out, const Batch& batch) = 0;
  /// Zeroes the per-sequence state of a slot (conv state, SSM state, ring, KV cache).
  virtual void reset(const Rows& rows) = 0;
  /// After a speculative forward with the same batch: row b keeps its first accepted[b] tokens
  /// (0 for pad rows). Stateless blocks and attention (whose length cursor is the model's
  /// position) need nothing.
  virtual void accept(const Batch& /*batch*/, const int32_t* /*accepted*/) {}
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
