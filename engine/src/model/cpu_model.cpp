// The float32 CPU model: embeddings, pre-norm residual blocks, final norm, lm_head
// (models.md §2.1). Nemotron-H / Mamba2: one mixer per layer, h += mixer(norm(h)). Qwen3-Next /
// Qwen3.5: h += mixer(input_layernorm(h)); h += mlp(post_attention_layernorm(h)).
#include <algorithm>
#include <chrono>
#include <cstring>

#include "cpu/ops.h"
#include "model/checks.h"
#include "model/cpu_model.h"
#include "model/layout.h"
#include "model/moe.h"
#include "model/state_store.h"
#include "model/weights.h"
#include "replayssm/engine/checkpoint.h"
#include "replayssm/engine/errors.h"

namespace replayssm::engine {

CpuModel::CpuModel(const Checkpoint& ck, const ModelOptions& opt) : opt_(opt) {
  cfg_ = parse_config_of(ck);
  opt_ = resolve_options(cfg_, opt);
  ssm_.mode = opt.ssm;
  ssm_.dt_floor = opt.dt_floor;
  ssm_.state_mode = engine_state_mode(opt_.state);
  const int64_t S = opt.max_slots;
  cur_origin_.assign(S, 0);
  cur_h_.assign(S, 0);
  cur_flush_.assign(S, 0);
  ssm_.spec_T = opt_.spec_T;
  ssm_.cursors.config = opt_.spec_T > 0
                            ? RingConfig{opt_.ring_L, opt_.spec_T, RingMode::kSpeculative}
                            : RingConfig{opt_.ring_L, 1, RingMode::kDecode};
  ssm_.cursors.config.validate();
  ssm_.cursors.origin = make_view(cur_origin_.data(), DType::kI32, {S});
  ssm_.cursors.h = make_view(cur_h_.data(), DType::kI32, {S});
  ssm_.cursors.is_flush = make_view(cur_flush_.data(), DType::kI8, {S});
  position_.assign(S, 0);

  const ModelLayout layout = model_layout(ck, cfg_);
  const int64_t V = cfg_.vocab_size, H = cfg_.hidden_size;
  embed_ = ck.load(layout.embed, {V, H});
  for (const SublayerSpec& spec : layout.sub) {
    Sublayer s;
    s.kind = spec.kind;
    s.norm = ck.load(spec.norm, {H});
    const std::string& mp = spec.prefix;
    switch (spec.kind) {
      case BlockKind::kMamba2: s.mixer = make_mamba2_mixer(ck, cfg_, mp, opt, ssm_); break;
      case BlockKind::kGdn: s.mixer = make_gdn_mixer(ck, cfg_, mp, opt, ssm_); break;
      case BlockKind::kAttention: s.mixer = make_attention(ck, cfg_, mp, opt); break;
      case BlockKind::kMlp: s.mixer = make_mlp(ck, cfg_, mp); break;
      case BlockKind::kMoe: s.mixer = make_moe(ck, cfg_, mp); break;
    }
    sub_.push_back(std::move(s));
  }
  final_norm_ = ck.load(layout.final_norm, {H});
  lm_head_.out = V;
  lm_head_.in = H;
  lm_head_.w = layout.lm_head.empty() ? embed_ : ck.load(layout.lm_head, {V, H});
}

void CpuModel::reset(std::span<const int32_t> slots) {
  check<ProtocolError>(!pending_, "reset: a verify step awaits accept()");
  check_slot_ids(slots, opt_.max_slots);
  if (slots.empty()) return;
  std::vector<int32_t> ids(slots.begin(), slots.end());
  Rows rows;
  rows.slot_ids = make_view(ids.data(), DType::kI32, {int64_t(ids.size())});
  for (auto& s : sub_) s.mixer->reset(rows);
  if (ssm_.mode == SsmMode::kReplay) replayssm::reset(ssm_.cursors, rows);
  for (int32_t s : slots) position_[s] = 0;
}

void CpuModel::make_batch(std::span<const int32_t> slots, bool speculative) {
  const int64_t B = static_cast<int64_t>(slots.size());
  slot_buf_.assign(slots.begin(), slots.end());
  pos_buf_.resize(B);
  off_.resize(B);
  int64_t tokens = 0, widest = 1;
  for (int64_t b = 0; b < B; ++b) {
    pos_buf_[b] = slots[b] >= 0 ? position_[slots[b]] : 0;
    off_[b] = tokens;
    tokens += ntok_[b];
    widest = std::max<int64_t>(widest, ntok_[b]);
  }
  batch_ = Batch{};
  batch_.n = B;
  batch_.tokens = tokens;
  batch_.T = widest;
  batch_.slots = slot_buf_.data();
  batch_.pos = pos_buf_.data();
  batch_.ntok = ntok_.data();
  batch_.off = off_.data();
  batch_.speculative = speculative;
  batch_.rows.slot_ids = make_view(slot_buf_.data(), DType::kI32, {B});
  batch_.rows.pad_slot_id = -1;
  if (speculative) batch_.rows.num_tokens = make_view(ntok_.data(), DType::kI32, {B});
}

void CpuModel::forward(std::span<const int32_t> tokens, std::span<float> logits,
                       std::map<std::string, double>* kind_ms) {
  using Clock = std::chrono::steady_clock;
  auto mark = Clock::now();
  // Adds the time since the last mark to kind_ms[key] (profiling only).
  const auto lap = [&](const std::string& key) {
    if (!kind_ms) return;
    const auto now = Clock::now();
    (*kind_ms)[key] += std::chrono::duration<double, std::milli>(now - mark).count();
    mark = now;
  };
  const int64_t NT = batch_.tokens, H = cfg_.hidden_size;
  hidden_.resize(NT * H);
  normed_.resize(NT * H);
  delta_.resize(NT * H);
  for (int64_t i = 0; i < NT; ++i)
    std::memcpy(&hidden_[i * H], &embed_[tokens[i] * H], H * sizeof(float));
  const bool qwen_norm = cfg_.qwen_norm;
  lap("embed+head");
  for (auto& s : sub_) {
    cpu::rms_norm(hidden_.data(), s.norm.data(), NT, H, cfg_.norm_eps, qwen_norm, normed_.data());
    s.mixer->forward(normed_.data(), delta_.data(), batch_);
    for (int64_t i = 0; i < NT * H; ++i) hidden_[i] += delta_[i];
    lap(block_name(s.kind));
  }
  cpu::rms_norm(hidden_.data(), final_norm_.data(), NT, H, cfg_.norm_eps, qwen_norm,
                normed_.data());
  lm_head_.apply(normed_.data(), NT, logits.data());
  lap("embed+head");
}

void CpuModel::step(std::span<const int32_t> tokens, std::span<const int32_t> slots,
                    std::span<float> logits) {
  check<ProtocolError>(!pending_, "step: a verify step awaits accept()");
  const int64_t B = static_cast<int64_t>(slots.size());
  check_step(cfg_, opt_, position_, tokens, slots, logits);
  if (B == 0) return;
  if (opt_.spec_T > 0) {
    // A model built for verify steps runs every step as one (T_b = 1, all accepted): its SSM
    // rings are in speculative mode and the snapshot baseline keeps its state in the pool.
    const std::vector<int32_t> ones(B, 1);
    verify(tokens, ones, slots, logits);
    accept(ones);
    return;
  }
  decode_step(tokens, slots, logits, nullptr);
}

void CpuModel::decode_step(std::span<const int32_t> tokens, std::span<const int32_t> slots,
                           std::span<float> logits, std::map<std::string, double>* kind_ms) {
  const int64_t B = static_cast<int64_t>(slots.size());
  ntok_.assign(B, 1);
  make_batch(slots, false);
  forward(tokens, logits, kind_ms);
  if (ssm_.mode == SsmMode::kReplay) {
    const auto t0 = std::chrono::steady_clock::now();
    accepted_.assign(B, 1);
    replayssm::commit(ssm_.cursors, batch_.rows, make_view(accepted_.data(), DType::kI32, {B}));
    if (kind_ms)
      (*kind_ms)["embed+head"] += std::chrono::duration<double, std::milli>(
                                      std::chrono::steady_clock::now() - t0).count();
  }
  for (int32_t s : slots) ++position_[s];
}

void CpuModel::skip_to_position(std::span<const int32_t> slots, int64_t n) {
  check<ProtocolError>(!pending_, "skip_to_position: a verify step awaits accept()");
  check_skip(opt_, slots, n);
  for (int32_t s : slots) position_[s] = n;
}

StepTiming CpuModel::time_steps(std::span<const int32_t> tokens, std::span<const int32_t> slots,
                                int32_t steps, bool profile) {
  check<ProtocolError>(!pending_, "time_steps: a verify step awaits accept()");
  check_time_steps(cfg_, opt_, position_, tokens, slots, steps, profile ? 1 : 0);
  check<UnsupportedError>(opt_.spec_T == 0,
                          "time_steps: the model was loaded for verify steps (spec_T ",
                          opt_.spec_T, "); time decode steps on a model with spec_T 0");
  StepTiming t;
  if (slots.empty()) return t;
  std::vector<float> logits(slots.size() * static_cast<size_t>(cfg_.vocab_size));
  for (int32_t i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    decode_step(tokens, slots, logits, nullptr);
    t.step_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if (profile) {
    decode_step(tokens, slots, logits, &t.kind_ms);
    for (const auto& [k, ms] : t.kind_ms) t.profiled_ms += ms;
  }
  return t;
}

StepTiming CpuModel::time_verify(std::span<const int32_t> tokens,
                                 std::span<const int32_t> num_tokens,
                                 std::span<const int32_t> slots,
                                 std::span<const std::vector<int32_t>> accepted, bool) {
  check<UnsupportedError>(opt_.spec_T > 0,
                          "time_verify: the model was loaded without speculative steps (spec_T 0)");
  check<ProtocolError>(!pending_, "time_verify: a verify step awaits accept()");
  // Every step's checks first, on a copy of the positions: nothing runs unless all would.
  check_verify_rows(cfg_, opt_, position_, tokens, num_tokens, slots);
  std::vector<int64_t> pos = position_;
  for (const std::vector<int32_t>& a : accepted) {
    check_verify_rows(cfg_, opt_, pos, tokens, num_tokens, slots);
    check_accepted(slots.data(), num_tokens.data(), static_cast<int64_t>(slots.size()), a);
    for (size_t b = 0; b < slots.size(); ++b)
      if (slots[b] >= 0) pos[slots[b]] += a[b];
  }
  StepTiming t;
  std::vector<float> logits(tokens.size() * static_cast<size_t>(cfg_.vocab_size));
  for (const std::vector<int32_t>& a : accepted) {
    const auto t0 = std::chrono::steady_clock::now();
    verify(tokens, num_tokens, slots, logits);
    accept(a);
    t.step_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return t;
}

void CpuModel::verify(std::span<const int32_t> tokens, std::span<const int32_t> num_tokens,
                      std::span<const int32_t> slots, std::span<float> logits) {
  check_verify(cfg_, opt_, pending_, position_, tokens, num_tokens, slots, logits);
  ntok_.assign(num_tokens.begin(), num_tokens.end());
  make_batch(slots, true);
  if (batch_.tokens > 0) forward(tokens, logits);  // (pad rows only: nothing to run)
  pending_ = true;
}

void CpuModel::accept(std::span<const int32_t> accepted) {
  check<ProtocolError>(pending_, "accept: no verify step is pending");
  const int64_t B = batch_.n;
  check_accepted(batch_.slots, batch_.ntok, B, accepted);
  accepted_.assign(accepted.begin(), accepted.end());
  for (auto& s : sub_) s.mixer->accept(batch_, accepted_.data());
  if (ssm_.mode == SsmMode::kReplay) {
    // One commit for every SSM layer. A discarded row (0 kept) is a pad row to the library's
    // commit (which takes 1..T_b); its cursor moves by ring.h's rule with n = 0 instead: no record
    // becomes history, and a flush step's fold of the committed history (already in the
    // checkpoint) still rebases the origin.
    commit_ids_.assign(slot_buf_.begin(), slot_buf_.end());
    for (int64_t b = 0; b < B; ++b)
      if (accepted_[b] == 0) commit_ids_[b] = -1;
    Rows rows = batch_.rows;
    rows.slot_ids = make_view(commit_ids_.data(), DType::kI32, {B});
    replayssm::commit(ssm_.cursors, rows, make_view(accepted_.data(), DType::kI32, {B}));
    for (int64_t b = 0; b < B; ++b) {
      const int32_t s = batch_.slots[b];
      if (s < 0 || accepted_[b] != 0) continue;
      const Cursor c{cur_origin_[s], cur_h_[s], cur_flush_[s] != 0};
      const Cursor next = commit_cursor(c, 0, ssm_.cursors.config);
      cur_origin_[s] = next.origin;
      cur_h_[s] = next.h;
      cur_flush_[s] = next.is_flush ? 1 : 0;
    }
  }
  for (int64_t b = 0; b < B; ++b)
    if (batch_.slots[b] >= 0) position_[batch_.slots[b]] += accepted_[b];
  pending_ = false;
}

}  // namespace replayssm::engine
