// The float32 CPU model: embeddings, pre-norm residual blocks, final norm, lm_head
// (models.md §2.1). Nemotron-H / Mamba2: one mixer per layer, h += mixer(norm(h)). Qwen3-Next /
// Qwen3.5: h += mixer(input_layernorm(h)); h += mlp(post_attention_layernorm(h)).
#include <algorithm>
#include <cstring>

#include "cpu/ops.h"
#include "model/checks.h"
#include "model/cpu_model.h"
#include "model/layout.h"
#include "model/moe.h"
#include "model/weights.h"
#include "replayssm/engine/checkpoint.h"

namespace replayssm::engine {

CpuModel::CpuModel(const std::string& dir, const ModelOptions& opt) : opt_(opt) {
  const Checkpoint ck = Checkpoint::open(dir);
  cfg_ = parse_config(ck.config());
  opt_ = resolve_options(cfg_, opt);
  ssm_.mode = opt.ssm;
  ssm_.dt_floor = opt.dt_floor;
  const int64_t S = opt.max_slots;
  cur_origin_.assign(S, 0);
  cur_h_.assign(S, 0);
  cur_flush_.assign(S, 0);
  ssm_.cursors.config = RingConfig{opt_.ring_L, 1, RingMode::kDecode};
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
  check_slot_ids(slots, opt_.max_slots);
  if (slots.empty()) return;
  std::vector<int32_t> ids(slots.begin(), slots.end());
  Rows rows;
  rows.slot_ids = make_view(ids.data(), DType::kI32, {int64_t(ids.size())});
  for (auto& s : sub_) s.mixer->reset(rows);
  if (ssm_.mode == SsmMode::kReplay) replayssm::reset(ssm_.cursors, rows);
  for (int32_t s : slots) position_[s] = 0;
}

void CpuModel::step(std::span<const int32_t> tokens, std::span<const int32_t> slots,
                    std::span<float> logits) {
  const int64_t B = static_cast<int64_t>(slots.size()), H = cfg_.hidden_size;
  check_step(cfg_, opt_, position_, tokens, slots, logits);
  if (B == 0) return;

  slot_buf_.assign(slots.begin(), slots.end());
  pos_buf_.resize(B);
  for (int64_t b = 0; b < B; ++b) pos_buf_[b] = position_[slots[b]];
  Batch batch;
  batch.n = B;
  batch.slots = slot_buf_.data();
  batch.pos = pos_buf_.data();
  batch.rows.slot_ids = make_view(slot_buf_.data(), DType::kI32, {B});

  hidden_.resize(B * H);
  normed_.resize(B * H);
  delta_.resize(B * H);
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(&hidden_[b * H], &embed_[tokens[b] * H], H * sizeof(float));
  const bool qwen_norm = cfg_.qwen_norm;
  for (auto& s : sub_) {
    cpu::rms_norm(hidden_.data(), s.norm.data(), B, H, cfg_.norm_eps, qwen_norm, normed_.data());
    s.mixer->forward(normed_.data(), delta_.data(), batch);
    for (int64_t i = 0; i < B * H; ++i) hidden_[i] += delta_[i];
  }
  cpu::rms_norm(hidden_.data(), final_norm_.data(), B, H, cfg_.norm_eps, qwen_norm,
                normed_.data());
  lm_head_.apply(normed_.data(), B, logits.data());

  if (ssm_.mode == SsmMode::kReplay) {
    accepted_.assign(B, 1);
    replayssm::commit(ssm_.cursors, batch.rows, make_view(accepted_.data(), DType::kI32, {B}));
  }
  for (int32_t s : slots) ++position_[s];
}

}  // namespace replayssm::engine
