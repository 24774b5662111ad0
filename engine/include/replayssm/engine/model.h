// A loaded hybrid model that decodes a batch of sequences one token per step. Each sequence lives
// in a slot: its conv states, SSM checkpoint + ring (or state), and KV cache. Math: reference
// models.md §2 (the transformers implementations named there), DESIGN.md §5.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "replayssm/engine/config.h"

namespace replayssm::engine {

enum class SsmMode { kConventional, kReplay };
const char* ssm_mode_name(SsmMode m);

struct ModelOptions {
  /// Run on the CUDA backend (cuda_model.h): UnsupportedError in a build without CUDA, without a
  /// device, or for sizes the CUDA kernels do not run.
  bool cuda = false;
  /// CUDA: replay decode steps from a CUDA graph per batch size, captured on the second step of
  /// that size (false: launch every kernel eagerly; the results are identical).
  bool cuda_graphs = true;
  SsmMode ssm = SsmMode::kReplay;
  /// ReplaySSM ring length (1..64; 1 = flush every step = the conventional step). 0: the
  /// dispatcher's choice for max_slots rows (dispatch.h: replay only where it measured faster).
  int32_t ring_L = 16;
  /// SSM state / checkpoint precision: "fp32" (default); on CUDA also "bf16" and "fp16": the
  /// state is stored in 16 bits (rounded to nearest even) with fp32 arithmetic — half the bytes,
  /// and the precision loss enters the recurrence (the shared baselines of DESIGN.md §2; the split
  /// modes come with the split-precision work). Other names: UnsupportedError.
  std::string state = "fp32";
  int32_t max_slots = 8;          ///< sequences resident at once
  int32_t max_context = 2048;     ///< tokens per sequence (sizes the KV caches)
  /// Mamba-2: clamp dt from below at this value after softplus (0: none). Reproduces HF versions
  /// whose torch path floors dt at time_step_min (models.md §2.3).
  double dt_floor = 0.0;
};

/// The ring length ring_L = 0 resolves to for a model decoding `batch` rows (dispatch.h; the
/// shortest recommendation over the model's SSM layer families).
int32_t auto_ring_length(const ModelConfig& cfg, int64_t batch);

class Model {
 public:
  virtual ~Model() = default;
  /// Loads dir (config.json + safetensors, checkpoint.h). Errors: CheckpointError (files,
  /// tensors), ConfigError (config or options), UnsupportedError (architecture feature or device).
  static std::unique_ptr<Model> load(const std::string& dir, const ModelOptions& options);

  virtual const ModelConfig& config() const = 0;
  virtual const ModelOptions& options() const = 0;

  /// Makes slots fresh sequences (position 0, zero conv/SSM state, empty ring and KV cache).
  /// SlotError for ids outside [0, max_slots).
  virtual void reset(std::span<const int32_t> slots) = 0;

  /// One decode step: row b feeds tokens[b] (in [0, vocab)) at the next position of slots[b].
  /// logits: [batch, vocab] float32, row-major. Slots must be distinct within the call.
  /// Errors (nothing is modified): SlotError (bad or duplicate slot, context full), ShapeError
  /// (sizes disagree), ConfigError (token out of range).
  virtual void step(std::span<const int32_t> tokens, std::span<const int32_t> slots,
                    std::span<float> logits) = 0;

  /// Tokens consumed so far by a slot.
  virtual int64_t position(int32_t slot) const = 0;
};

}  // namespace replayssm::engine
