// A loaded hybrid model that decodes a batch of sequences one token per step. Each sequence lives
// in a slot: its conv states, SSM checkpoint + ring (or state), and KV cache. Math: reference
// models.md §2 (the transformers implementations named there), DESIGN.md §5.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

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
  /// SSM state precision (DESIGN.md §2 "Precision", replayssm/precision.h):
  ///   "fp32" (default; = "fp32/fp32"): float32 state / checkpoint.
  ///   "bf16", "fp16" (CUDA only): the state stored in 16 bits (nearest even) with fp32
  ///     arithmetic, rounded every step (a shared baseline; on the CPU: "shared-bf16/-fp16").
  ///   split modes "<recurrence>/<read>" (fp32/bf16, fp32/fp16, fp16sr/fp16sr, fp32/nvfp4,
  ///     fp16sr/nvfp4, fp8/nvfp4, fp32/fp8): ssm kReplay only; the checkpoint in the recurrence
  ///     format, ordinary steps read the read copy. CPU: every SSM layer; CUDA kernels:
  ///     fp32/bf16, fp32/fp16, fp32/fp8, fp32/nvfp4, fp16sr/fp16sr, fp16sr/nvfp4 (Mamba-2 and
  ///     GDN layers).
  ///   shared baselines "shared-<f>" (fp16, bf16, fp8, nvfp4): ssm kConventional only; CPU, or
  ///     CUDA with emulate_state.
  /// A shared name with kReplay or a split name with kConventional: ConfigError; an unknown name:
  /// ConfigError naming it; a mode the backend does not run: UnsupportedError naming it. Other
  /// modes than fp32 run without speculative steps (spec_T 0). Stochastic rounding (fp16sr) draws
  /// its bits from a seed per (SSM layer, slot); reset() restarts a slot's draws.
  std::string state = "fp32";
  /// CUDA: run the modes the CUDA kernels do not have (every other split mode and the shared
  /// baselines, on either layer kind) with the same rounding over float32 storage (the values are
  /// the mode's; memory and speed are not: for accuracy studies such as `replayssm eval`). GDN
  /// fp8 / nvfp4 read copies pass through a float16 buffer: one more rounding, at most half a
  /// float16 ulp (relative <= 2^-11 from 2^-14 up), on top of the format's own. false: such a
  /// mode raises UnsupportedError.
  bool emulate_state = false;
  int32_t max_slots = 8;          ///< sequences resident at once
  int32_t max_context = 2048;     ///< tokens per sequence (sizes the KV caches)
  /// Mamba-2: clamp dt from below at this value after softplus (0: none). Reproduces HF versions
  /// whose torch path floors dt at time_step_min (models.md §2.3). ConfigError when negative,
  /// not finite, or nonzero for a model without Mamba-2 layers.
  double dt_floor = 0.0;
  /// Speculative decoding (DESIGN.md §2 "Speculative decoding"): the most tokens one row may feed
  /// per verify() step, 1..8 (the last accepted token + up to spec_T - 1 drafts); 0: no verify
  /// steps (step() only). With ssm kReplay the SSM layers run the library's verify on a
  /// kSpeculative ring (ring_L >= 2 spec_T); with kConventional they run the peers' snapshot
  /// baseline (spec_T sequential conventional updates, one full state snapshot per token, the
  /// accepted one selected by accept(); on CUDA each slot owns spec_T + 1 state buffers and
  /// accept() moves which one holds its state, as the peers' serving engines do).
  int32_t spec_T = 0;
};

/// Whether the CUDA engine's kernels run state mode `state` (a ModelOptions::state name) on every
/// SSM layer of `cfg` as it is (else the CUDA engine needs ModelOptions::emulate_state): fp32,
/// bf16, fp16 and the split modes fp32/bf16, fp32/fp16, fp32/fp8, fp32/nvfp4, fp16sr/fp16sr and
/// fp16sr/nvfp4, on Mamba-2 and GDN layers alike. ConfigError for an unknown name.
bool cuda_state_native(const ModelConfig& cfg, const std::string& state);

/// Checks options against a config as Model::load does before reading any weight: ConfigError /
/// UnsupportedError naming the bad value, including, with options.cuda, a missing CUDA build or
/// device and the sizes and state modes the CUDA kernels run.
void validate_options(const ModelConfig& cfg, const ModelOptions& options);

/// The ring length ring_L = 0 resolves to for a model decoding `batch` rows with state mode
/// `state` (ModelOptions::state; dispatch.h: the shortest recommendation over the model's SSM
/// layer families, given each GDN layer's state size, from larger batches for a split mode with
/// a read copy). ConfigError for an unknown state name.
int32_t auto_ring_length(const ModelConfig& cfg, int64_t batch, const std::string& state = "fp32");

class Checkpoint;

/// What Model::time_steps measured (benchmark support).
struct StepTiming {
  /// Each timed step's duration in milliseconds, in order: CUDA events around each step's graph
  /// launch on the device (CUDA), the host clock around the step (CPU).
  std::vector<double> step_ms;
  /// One further profiled step (when asked): milliseconds per part, keyed by block kind
  /// (block_name(): "mamba2", "gdn", "attention", "mlp", "moe"; each sub-layer's norm included)
  /// and "embed+head" (embedding, final norm, lm_head, cursor commit). CUDA: a separate graph of
  /// the same step with an event between sub-layers (the events cost a little; the sum is
  /// profiled_ms, not a step_ms value).
  std::map<std::string, double> kind_ms;
  double profiled_ms = 0;  ///< the profiled step's total
  /// Untimed steps run first (CUDA: one eager step when the batch size had none yet, so that the
  /// timed steps replay its captured graph). They advance positions like the others.
  int32_t warmup_steps = 0;
};

/// A loaded model. One instance is not thread-safe; distinct CUDA instances may be stepped from
/// different host threads at once (each owns its stream, device memory and cuBLAS handle; graph
/// capture is thread-local), which evaluate() does. The "nothing modified" promises below hold for
/// the argument checks; a DeviceError (a failed CUDA call or kernel, reported by the call or by a
/// later one) can leave a step half done: reset() the rows' slots before using them again.
class Model {
 public:
  virtual ~Model() = default;
  /// Loads dir (config.json + safetensors, checkpoint.h). Errors: CheckpointError (files,
  /// tensors), ConfigError (config or options), UnsupportedError (architecture feature or device).
  static std::unique_ptr<Model> load(const std::string& dir, const ModelOptions& options);
  /// The same from an open checkpoint (e.g. Checkpoint::random for benchmarks).
  static std::unique_ptr<Model> load(const Checkpoint& ck, const ModelOptions& options);

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

  /// A decode step as step() that returns, instead of the logits, each row's greedy next token:
  /// next[b] = the argmax of its logits (the lowest id on ties, as sample_token at temperature 0),
  /// or -1 when any of them is NaN or infinite. The CUDA model computes it on the device, so only
  /// these ids leave it (step() downloads batch x vocab floats). next: [batch] int32. Errors and
  /// what is modified as step().
  virtual void step_greedy(std::span<const int32_t> tokens, std::span<const int32_t> slots,
                           std::span<int32_t> next);

  /// Tokens consumed so far by a slot.
  virtual int64_t position(int32_t slot) const = 0;

  /// Speculative verify step (options().spec_T >= 1). Row b feeds num_tokens[b] tokens (1..spec_T:
  /// its last accepted token, then drafts) at positions position(slots[b]) onwards, through every
  /// layer at once; a pad row has slot -1 and num_tokens 0. tokens: the rows' tokens one after
  /// another (sum of num_tokens). logits: [sum num_tokens, vocab] in the same order: the logits
  /// after each fed token. Nothing is committed: call accept() next, before any other step, verify
  /// or reset. Errors (nothing modified): UnsupportedError (spec_T = 0), SlotError (bad or
  /// repeated slot, count outside 1..spec_T, context full), ShapeError, ConfigError (token range),
  /// ProtocolError (a verify still awaits accept).
  virtual void verify(std::span<const int32_t> tokens, std::span<const int32_t> num_tokens,
                      std::span<const int32_t> slots, std::span<float> logits) = 0;

  /// verify() that returns, instead of the logits, the greedy token after each fed token:
  /// next [sum num_tokens], in the same order, each as step_greedy's (the argmax, lowest id on
  /// ties; -1 for non-finite logits): what greedy acceptance needs. On CUDA only these ids leave
  /// the device. Errors, pending state and accept() as verify().
  virtual void verify_greedy(std::span<const int32_t> tokens, std::span<const int32_t> num_tokens,
                             std::span<const int32_t> slots, std::span<int32_t> next);

  /// Ends the pending verify: row b keeps its first accepted[b] tokens (1..num_tokens[b]; 0 for
  /// pad rows; 0 on a real row discards its whole step, as if it had not run). The SSM ring cursors are committed once for all layers (rollback of the rest is a
  /// cursor move), the conv states restored to after the kept tokens, the snapshot baseline
  /// selects its accepted snapshot, attention keeps its rejected keys past the length cursor
  /// (overwritten later). Errors (nothing modified): ProtocolError (no pending verify), ShapeError
  /// (size), SlotError (count out of range).
  virtual void accept(std::span<const int32_t> accepted) = 0;

  // Benchmark support (`replayssm bench e2e`): the steps below do the work of real decode steps,
  // but what they compute is not a continuation of any text.

  /// Moves fresh or used slots to position n as if they had consumed n tokens, without running
  /// them: the KV cache positions below n hold whatever they hold (zeros for a fresh slot), the
  /// conv and SSM state and the ring cursors are left as they are. Later steps attend over n
  /// positions, so they cost what a step at context n costs. Errors (nothing modified):
  /// SlotError (bad or repeated slot; n outside [0, max_context)), ProtocolError (a verify
  /// awaits accept).
  virtual void skip_to_position(std::span<const int32_t> slots, int64_t n) = 0;

  /// Runs `steps` decode steps of the rows (each step feeds `tokens` again: nothing is sampled,
  /// the logits stay where the model computes them) and times each one; with `profile`, one more
  /// step is run and timed part by part (StepTiming::kind_ms). Every step (the profiled one
  /// included) advances the rows' positions and SSM rings exactly like step(). Errors as step()
  /// (nothing modified), SlotError when the context cannot hold steps (+ 1 with profile, + 1 for
  /// a warm-up step: StepTiming::warmup_steps) more tokens, ConfigError for steps < 1,
  /// UnsupportedError for a model loaded with spec_T > 0 (time its decode steps on one without).
  virtual StepTiming time_steps(std::span<const int32_t> tokens, std::span<const int32_t> slots,
                                int32_t steps, bool profile) = 0;

  /// Runs one verify + accept step per entry of `accepted` (each as accept()'s counts), feeding
  /// the same rows every time (tokens, num_tokens and slots as verify(); nothing is sampled, the
  /// logits stay where the model computes them), and times each step: CUDA events around the
  /// step's launches (CUDA), the host clock (CPU). On CUDA a (batch, T) shape never run before gets
  /// one untimed step first with accepted[0]'s counts (StepTiming::warmup_steps). With `profile`
  /// (CUDA; ignored on the CPU) one more step with the last entry's counts is run and timed part
  /// by part as time_steps does, plus "accept" (accept()'s launches). Every step advances
  /// positions and rings exactly like verify() + accept(). Errors as verify() and accept() for any
  /// step (nothing modified).
  virtual StepTiming time_verify(std::span<const int32_t> tokens,
                                 std::span<const int32_t> num_tokens,
                                 std::span<const int32_t> slots,
                                 std::span<const std::vector<int32_t>> accepted,
                                 bool profile = false) = 0;

  /// Bytes of device memory the model holds (weights, SSM states and rings, KV caches, buffers);
  /// 0 on the CPU.
  virtual int64_t device_bytes() const { return 0; }
};

}  // namespace replayssm::engine
