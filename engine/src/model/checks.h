// Argument checks shared by the CPU and CUDA models (model.h documents the errors): every check
// runs before anything is modified.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "replayssm/engine/model.h"
#include "replayssm/precision.h"

namespace replayssm::engine {

/// Validates the options against the config and returns them with ring_L = 0 resolved to the
/// dispatcher's choice. ConfigError (sizes, ring length), UnsupportedError (state mode).
ModelOptions resolve_options(const ModelConfig& cfg, const ModelOptions& opt);

/// The state mode name (ModelOptions::state): "fp32"; "bf16" / "fp16" (CUDA only:
/// UnsupportedError on the CPU); any name of precision.h (ConfigError naming an unknown one).
/// Shared modes need SsmMode::kConventional, split modes kReplay (ConfigError); other modes than
/// fp32/fp32 run without speculative steps (UnsupportedError), and on CUDA only those some CUDA
/// kernel runs unless options.emulate_state (UnsupportedError naming the mode; the CUDA model
/// checks its layer kinds).
void check_state_option(const ModelOptions& opt);

/// Whether the CUDA kernels run mode m natively (Mamba-2 and GDN layers alike; model.h
/// cuda_state_native).
bool cuda_mode_native(const StateMode& m);

/// SlotError for an id outside [0, max_slots) or one given twice.
void check_slot_ids(std::span<const int32_t> slots, int32_t max_slots);

/// The arguments of Model::step: one token in [0, vocab) per distinct slot with room left in its
/// context, logits sized batch * vocab.
void check_step(const ModelConfig& cfg, const ModelOptions& opt,
                const std::vector<int64_t>& position, std::span<const int32_t> tokens,
                std::span<const int32_t> slots, std::span<const float> logits);

/// The arguments of Model::step_greedy: as step's, with next [batch] in place of the logits.
void check_step_greedy(const ModelConfig& cfg, const ModelOptions& opt,
                       const std::vector<int64_t>& position, std::span<const int32_t> tokens,
                       std::span<const int32_t> slots, std::span<const int32_t> next);

/// The arguments of Model::time_steps: as step's, with room for steps + extra (untimed warm-up
/// and profiled steps) tokens in every row's context; steps >= 1.
void check_time_steps(const ModelConfig& cfg, const ModelOptions& opt,
                      const std::vector<int64_t>& position, std::span<const int32_t> tokens,
                      std::span<const int32_t> slots, int32_t steps, int32_t extra);

/// The arguments of Model::skip_to_position: distinct slot ids, 0 <= n < max_context.
void check_skip(const ModelOptions& opt, std::span<const int32_t> slots, int64_t n);

/// A call of Model::verify (model.h): a model loaded with spec_T (UnsupportedError), no verify
/// awaiting accept (`pending`: ProtocolError), and per row a distinct slot feeding 1..spec_T
/// tokens with room in its context, or a pad row (slot -1, 0 tokens); tokens and logits sized by
/// the sum.
void check_verify(const ModelConfig& cfg, const ModelOptions& opt, bool pending,
                  const std::vector<int64_t>& position, std::span<const int32_t> tokens,
                  std::span<const int32_t> num_tokens, std::span<const int32_t> slots,
                  std::span<const float> logits);
/// The arguments of Model::verify_greedy: as verify's, with next [sum num_tokens] in place of
/// the logits.
void check_verify_greedy(const ModelConfig& cfg, const ModelOptions& opt, bool pending,
                         const std::vector<int64_t>& position, std::span<const int32_t> tokens,
                         std::span<const int32_t> num_tokens, std::span<const int32_t> slots,
                         std::span<const int32_t> next);

/// check_verify without the logits (Model::time_verify, whose logits stay on the device).
void check_verify_rows(const ModelConfig& cfg, const ModelOptions& opt,
                       const std::vector<int64_t>& position, std::span<const int32_t> tokens,
                       std::span<const int32_t> num_tokens, std::span<const int32_t> slots);

/// The counts of Model::accept: one per row of the pending verify, 0..ntok[b] (0 for pad rows;
/// 0 on a real row discards its step).
void check_accepted(const int32_t* slots, const int32_t* ntok, int64_t rows,
                    std::span<const int32_t> accepted);

}  // namespace replayssm::engine
