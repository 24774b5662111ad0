#include "model/checks.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "model/state_store.h"
#include "replayssm/dispatch.h"

namespace replayssm::engine {

int32_t auto_ring_length(const ModelConfig& cfg, int64_t batch, const std::string& state) {
  // "bf16" / "fp16" name the CUDA engine's 16-bit state (no read copy), not a precision.h mode.
  // A split mode passes what its ordinary steps read (fp16sr/fp16sr: kFp16Sr, its checkpoint).
  StateFormat copy = StateFormat::kFp32;
  if (state != "bf16" && state != "fp16" && engine_state_mode(state).is_split())
    copy = engine_state_mode(state).read;
  int32_t L = 16;
  for (BlockKind k : cfg.layers) {
    if (k == BlockKind::kMamba2)
      L = std::min(L, recommended_ring_length(SsmFamily::kMamba2, batch, 16, copy));
    if (k == BlockKind::kGdn) {
      const GdnConfig& g = cfg.gdn;
      const int64_t state_bytes = g.num_v_heads * g.head_v_dim * g.head_k_dim * 4;
      L = std::min(L, recommended_ring_length(SsmFamily::kGdn, batch, 16, copy, state_bytes));
    }
  }
  return L;
}

void check_state_option(const ModelOptions& opt) {
  const std::string& name = opt.state;
  // "bf16" / "fp16": the CUDA engine's 16-bit state (rounded every step: a shared baseline).
  if (name == "bf16" || name == "fp16") {
    check<UnsupportedError>(opt.cuda, "state mode '", name, "' runs on the CUDA engine only (the "
                            "CPU engine runs the 16-bit shared state as 'shared-", name,
                            "' with the conventional step)");
    check<UnsupportedError>(opt.spec_T == 0, "state mode '", name, "': speculative decoding runs "
                            "the fp32 state only (verify is fp32/fp32 in the library)");
    return;
  }
  const StateMode m = engine_state_mode(name);  // ConfigError naming an unknown name
  if (m.is_default()) return;
  check<UnsupportedError>(opt.spec_T == 0, "state mode '", name, "': speculative decoding runs "
                          "the fp32 state only (verify is fp32/fp32 in the library)");
  check<ConfigError>(!m.shared || opt.ssm == SsmMode::kConventional, "state mode '", name,
                     "' is a shared baseline (one low-precision state updated every step): it "
                     "runs with --ssm conventional, not ", ssm_mode_name(opt.ssm));
  check<ConfigError>(!m.is_split() || opt.ssm == SsmMode::kReplay, "state mode '", name,
                     "' is a split mode (recurrence/read, a ReplaySSM checkpoint): it runs with --ssm "
                     "replay, not ", ssm_mode_name(opt.ssm));
  // Natively the CUDA kernels run fp32 checkpoints with a bf16 / fp16 / fp8 / nvfp4 read copy,
  // fp16sr/fp16sr and fp16sr/nvfp4; anything else only emulated (ModelOptions::emulate_state).
  check<UnsupportedError>(!opt.cuda || cuda_mode_native(m) || opt.emulate_state, "state mode '",
                          name,
                          "' is not built on the CUDA engine (its kernels run fp32, bf16, fp16, "
                          "fp32/bf16, fp32/fp16, fp32/fp8, fp32/nvfp4, fp16sr/fp16sr and "
                          "fp16sr/nvfp4): run it "
                          "with --device cpu");
}

bool cuda_mode_native(const StateMode& m) {
  if (m.is_default()) return true;
  if (m.shared) return false;
  return m.recurrence == StateFormat::kFp32 ||  // read: bf16, fp16, fp8 or nvfp4
         (m.recurrence == StateFormat::kFp16Sr &&
          (m.read == StateFormat::kFp16Sr || m.read == StateFormat::kNvfp4));
}

bool cuda_state_native(const ModelConfig& /*cfg*/, const std::string& state) {
  return cuda_mode_native(engine_state_mode(state));  // the same modes on every SSM layer kind
}

ModelOptions resolve_options(const ModelConfig& cfg, const ModelOptions& opt) {
  check<ConfigError>(opt.max_slots >= 1, "max_slots is ", opt.max_slots, ", expected >= 1");
  check<ConfigError>(opt.max_context >= 1, "max_context is ", opt.max_context,
                     ", expected >= 1");
  check<ConfigError>(opt.ring_L >= 0 && opt.ring_L <= 64, "ring length L is ", opt.ring_L,
                     ", expected 1..64 (0: the dispatcher's choice)");
  check_state_option(opt);
  check<ConfigError>(opt.spec_T >= 0 && opt.spec_T <= 8, "speculative T is ", opt.spec_T,
                     ", expected 1..8 (0: no speculative decoding)");
  check<ConfigError>(std::isfinite(opt.dt_floor) && opt.dt_floor >= 0, "dt floor is ",
                     opt.dt_floor, ", expected a finite value >= 0 (0: none)");
  const bool mamba2 = std::any_of(cfg.layers.begin(), cfg.layers.end(),
                                  [](BlockKind k) { return k == BlockKind::kMamba2; });
  check<ConfigError>(opt.dt_floor == 0 || mamba2, "dt floor is ", opt.dt_floor,
                     ", but the model has no Mamba-2 layer (the floor clamps Mamba-2's dt; "
                     "expected 0)");
  ModelOptions out = opt;
  if (out.ring_L == 0) {
    out.ring_L = auto_ring_length(cfg, out.max_slots, out.state);
    // A speculative ring needs room for the committed history and T drafts (ring.h: L >= 2T).
    out.ring_L = std::max(out.ring_L, 2 * out.spec_T);
  }
  check<ConfigError>(out.spec_T == 0 || out.ssm != SsmMode::kReplay || out.ring_L >= 2 * out.spec_T,
                     "ring length L is ", out.ring_L, ", expected >= 2T = ", 2 * out.spec_T,
                     " for speculative decoding with T = ", out.spec_T);
  // Conventional decoding keeps no ring, but the models still build speculative cursors (ring.h:
  // L >= 2T): the snapshot baseline accepts any ring_L.
  if (out.ssm == SsmMode::kConventional) out.ring_L = std::max(out.ring_L, 2 * out.spec_T);
  return out;
}

void check_slot_ids(std::span<const int32_t> slots, int32_t max_slots) {
  std::set<int32_t> seen;
  for (int32_t s : slots) {
    check<SlotError>(s >= 0 && s < max_slots, "slot id ", s, " is outside [0, ", max_slots, ")");
    check<SlotError>(seen.insert(s).second, "slot id ", s, " appears twice in one step");
  }
}

namespace {

/// One token in [0, vocab) per distinct slot, each slot with room for `room` more tokens.
void check_rows(const ModelConfig& cfg, const ModelOptions& opt,
                const std::vector<int64_t>& position, std::span<const int32_t> tokens,
                std::span<const int32_t> slots, int64_t room, const char* what) {
  const int64_t B = static_cast<int64_t>(slots.size()), V = cfg.vocab_size;
  check<ShapeError>(tokens.size() == slots.size(), what, ": ", tokens.size(), " tokens for ",
                    slots.size(), " slots, expected one token per slot");
  check_slot_ids(slots, opt.max_slots);
  for (int64_t b = 0; b < B; ++b) {
    check<ConfigError>(tokens[b] >= 0 && tokens[b] < V, "token ", tokens[b], " is outside [0, ",
                       V, ")");
    check<SlotError>(position[slots[b]] + room <= opt.max_context, "slot ", slots[b], " at position ",
                     position[slots[b]], " has no room for ", room, " more tokens: context ",
                     opt.max_context, " tokens");
  }
}

}  // namespace

void check_step(const ModelConfig& cfg, const ModelOptions& opt,
                const std::vector<int64_t>& position, std::span<const int32_t> tokens,
                std::span<const int32_t> slots, std::span<const float> logits) {
  const int64_t B = static_cast<int64_t>(slots.size()), V = cfg.vocab_size;
  check<ShapeError>(tokens.size() == slots.size(), "step: ", tokens.size(), " tokens for ",
                    slots.size(), " slots, expected one token per slot");
  check<ShapeError>(int64_t(logits.size()) == B * V, "step: logits hold ", logits.size(),
                    " floats, expected batch * vocab = ", B * V);
  check_rows(cfg, opt, position, tokens, slots, 1, "step");
}

void check_step_greedy(const ModelConfig& cfg, const ModelOptions& opt,
                       const std::vector<int64_t>& position, std::span<const int32_t> tokens,
                       std::span<const int32_t> slots, std::span<const int32_t> next) {
  check<ShapeError>(tokens.size() == slots.size(), "step_greedy: ", tokens.size(), " tokens for ",
                    slots.size(), " slots, expected one token per slot");
  check<ShapeError>(next.size() == slots.size(), "step_greedy: next has ", next.size(),
                    " entries, expected one per row (", slots.size(), ")");
  check_rows(cfg, opt, position, tokens, slots, 1, "step_greedy");
}

void check_time_steps(const ModelConfig& cfg, const ModelOptions& opt,
                      const std::vector<int64_t>& position, std::span<const int32_t> tokens,
                      std::span<const int32_t> slots, int32_t steps, int32_t extra) {
  check<ConfigError>(steps >= 1, "time_steps: steps ", steps, ", expected >= 1");
  check_rows(cfg, opt, position, tokens, slots, int64_t{steps} + extra, "time_steps");
}

void check_skip(const ModelOptions& opt, std::span<const int32_t> slots, int64_t n) {
  check_slot_ids(slots, opt.max_slots);
  check<SlotError>(n >= 0 && n < opt.max_context, "skip_to_position: position ", n,
                   " is outside [0, ", opt.max_context, ") (max_context)");
}

}  // namespace replayssm::engine

namespace replayssm::engine {

namespace {
/// What verify() and verify_greedy() check before their outputs' sizes.
void check_verify_call(const ModelConfig& cfg, const ModelOptions& opt, bool pending,
                       const std::vector<int64_t>& position, std::span<const int32_t> tokens,
                       std::span<const int32_t> num_tokens, std::span<const int32_t> slots) {
  check<UnsupportedError>(opt.spec_T > 0,
                          "verify: the model was loaded without speculative steps (spec_T 0)");
  check<ProtocolError>(!pending, "verify: the previous verify step awaits accept()");
  check_verify_rows(cfg, opt, position, tokens, num_tokens, slots);
}
}  // namespace

void check_verify(const ModelConfig& cfg, const ModelOptions& opt, bool pending,
                  const std::vector<int64_t>& position, std::span<const int32_t> tokens,
                  std::span<const int32_t> num_tokens, std::span<const int32_t> slots,
                  std::span<const float> logits) {
  check_verify_call(cfg, opt, pending, position, tokens, num_tokens, slots);
  const int64_t total = static_cast<int64_t>(tokens.size()), V = cfg.vocab_size;
  check<ShapeError>(int64_t(logits.size()) == total * V, "verify: logits hold ", logits.size(),
                    " floats, expected tokens * vocab = ", total * V);
}

void check_verify_greedy(const ModelConfig& cfg, const ModelOptions& opt, bool pending,
                         const std::vector<int64_t>& position, std::span<const int32_t> tokens,
                         std::span<const int32_t> num_tokens, std::span<const int32_t> slots,
                         std::span<const int32_t> next) {
  check_verify_call(cfg, opt, pending, position, tokens, num_tokens, slots);
  check<ShapeError>(next.size() == tokens.size(), "verify_greedy: next has ", next.size(),
                    " entries, expected one per fed token (", tokens.size(), ")");
}

void check_verify_rows(const ModelConfig& cfg, const ModelOptions& opt,
                       const std::vector<int64_t>& position, std::span<const int32_t> tokens,
                       std::span<const int32_t> num_tokens, std::span<const int32_t> slots) {
  const int64_t B = static_cast<int64_t>(slots.size()), V = cfg.vocab_size;
  check<ShapeError>(num_tokens.size() == slots.size(), "verify: ", num_tokens.size(),
                    " token counts for ", slots.size(), " rows, expected one per row");
  std::set<int32_t> seen;
  int64_t total = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int32_t s = slots[b], n = num_tokens[b];
    if (s == -1) {
      check<SlotError>(n == 0, "verify: pad row ", b, " feeds ", n, " tokens, expected 0");
      continue;
    }
    check<SlotError>(s >= 0 && s < opt.max_slots, "slot id ", s, " is outside [0, ",
                     opt.max_slots, ") (-1: pad row)");
    check<SlotError>(seen.insert(s).second, "slot id ", s, " appears twice in one step");
    check<SlotError>(n >= 1 && n <= opt.spec_T, "verify: row ", b, " feeds ", n,
                     " tokens, expected 1..", opt.spec_T, " (spec_T)");
    check<SlotError>(position[s] + n <= opt.max_context, "slot ", s, " is full: ", position[s],
                     " + ", n, " tokens exceed the context of ", opt.max_context);
    total += n;
  }
  check<ShapeError>(int64_t(tokens.size()) == total, "verify: ", tokens.size(),
                    " tokens, expected the sum of num_tokens = ", total);
  for (int32_t t : tokens)
    check<ConfigError>(t >= 0 && t < V, "token ", t, " is outside [0, ", V, ")");
}

void check_accepted(const int32_t* slots, const int32_t* ntok, int64_t rows,
                    std::span<const int32_t> accepted) {
  check<ShapeError>(int64_t(accepted.size()) == rows, "accept: ", accepted.size(),
                    " counts, expected one per row of the verify step (", rows, ")");
  for (int64_t b = 0; b < rows; ++b) {
    if (slots[b] < 0) {
      check<SlotError>(accepted[b] == 0, "accept: pad row ", b, " accepted ", accepted[b],
                       ", expected 0");
      continue;
    }
    check<SlotError>(accepted[b] >= 0 && accepted[b] <= ntok[b], "accept: row ", b, " accepted ",
                     accepted[b], ", expected 1..", ntok[b],
                     " (tokens fed to that row; 0 discards the row's step)");
  }
}

}  // namespace replayssm::engine
